"""CSR tree generation, the reference search path vs the pool engine vs the vLLM drivers (`tree.engine`).

    OMP_NUM_THREADS=1 python bench/csr_generate.py --prompts 16,256 [--ckpt DIR] [--write bench/RESULTS.md]

Both engines grow trees with the released rules (5 beams in 5 groups, penalty 3.0, stop at ".",
max_chars 1024, pruning 1 best + 2 worst) capped at --max-depth / --max-new-tokens. The reference runs
at the earlier preset bounds (prompt_batch 8, batch_nodes 24: levels in lockstep, every node prefilled
from its prompt); the pool engine runs `configs/csr.yaml`'s own bounds (no count caps, `tree.kv_budget: auto`:
on CPU, with the tiny model, every prompt it is given is resident).
Counted with forward hooks on the model and on its vision tower, per engine:
  forwards per 1,000 candidate sentences, mean rows per forward, vision-tower images per prompt,
  prefill tokens (forwards feeding more than one token per row, unmasked) per candidate sentence,
  host bytes per search step (reference: the rows x vocabulary log-probs it copies; pool: what it reads).
Then `tree.engine: vllm`'s group beam search (training/csr/vllm_beam.py) with a `TopNWorker` in place of the
vLLM worker (the top N of the model's own log-probs: no vLLM needed), its previous driver (levels in
lockstep) and the refill driver at both bounds: worker calls per 1,000 sentences, requests per call.
The trees are compared (`bench/tree_diff.py` `differences`): every differing tree is printed with its
first difference and the score gap of the two candidates that swapped there; only near-ties (gap <= 1e-5) are acceptable. Without --ckpt the tiny kit checkpoint is built
in a temp dir; images are solid-colour PNGs (content does not change the cost).
"""
from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def vision_module(model):
    """The vision tower of a loaded VLM (the module every image goes through), or None."""
    for path in ("model.vision_tower", "model.visual", "model.vision_model", "vision_tower", "visual"):
        mod = model
        for name in path.split("."):
            mod = getattr(mod, name, None)
        if mod is not None:
            return mod
    return None


class Hooks:
    """Forward counters on a model and its vision tower."""

    def __init__(self, model):
        self.model = model
        self.handles = [model.register_forward_pre_hook(self._fwd, with_kwargs=True)]
        vis = vision_module(model)
        if vis is not None:
            self.handles.append(vis.register_forward_pre_hook(self._vis, with_kwargs=True))
        self.vocab = model.get_output_embeddings().weight.shape[0]
        self.reset()

    def reset(self) -> None:
        self.forwards = self.rows = self.images = self.prefill_tokens = self.decode_rows = 0

    def _fwd(self, module, args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask")
        n, length = ids.shape[0], ids.shape[-1]
        self.forwards += 1
        if mask is not None and mask.dim() == 4:  # the pool's packed beams (tree.share_prefix): one token a beam
            self.rows += n * length
            self.decode_rows += n * length
            return
        self.rows += n
        if length > 1:
            self.prefill_tokens += int(mask[:, -length:].sum()) if mask is not None else n * length
        else:
            self.decode_rows += n

    def _vis(self, module, args, kwargs) -> None:
        pix = kwargs.get("pixel_values", args[0] if args else None)
        self.images += int(pix.shape[0]) if pix is not None and pix.dim() == 4 else 1

    def close(self) -> None:
        for h in self.handles:
            h.remove()


PRESET_BOUNDS = {"prompt_batch": 8, "batch_nodes": 24}  # the earlier configs/csr.yaml's, what the reference runs with
ALL_RESIDENT = {"prompt_batch": None, "batch_nodes": None}  # configs/csr.yaml's now: the KV budget alone


def tree_config(engine: str, max_new: int, depth: int, bounds: dict | None = None, **rules):
    from training.csr.config import TreeConfig

    if bounds is None:
        bounds = PRESET_BOUNDS if engine == "reference" else ALL_RESIDENT
    return TreeConfig(max_new_tokens=max_new, max_depth=depth, engine=engine, **bounds, **rules)


class TopNWorker:
    """A stand-in for the vLLM worker of `tree.engine: vllm` (training/csr/vllm_beam.py), no vLLM needed: each
    row (prompt, node, beam tokens) is answered with the top N of the model's own log-softmax at its next
    position. The forwards are KV-cached as the reference computes them: a node's first rows prefill its
    context (prompt + response, with the image) in one forward, every later row extends its row of the
    previous call by its one new token (`pool.Runner`); at most two forwards per call."""

    def __init__(self, rules, n: int):
        from training.csr.pool import Runner, Stats

        self.runner, self.n = Runner(rules.vlm.model, rules.spec, Stats()), n
        self.prev: dict = {}  # (tree id, node, tokens) -> its context row, for the rows of the last call

    def __call__(self, rows) -> list:
        import torch

        keys = [(p.tree.id, nid, tuple(toks)) for p, nid, toks in rows]
        first = [i for i, (_, _, t) in enumerate(keys) if not t]
        later = [i for i, (_, _, t) in enumerate(keys) if t]
        ctx: list = [None] * len(rows)
        logits: list = [None] * len(rows)
        with torch.inference_mode():
            if first:
                got, lg, why = self.runner.prompts(
                    [list(rows[i][0].tree.prompt_ids) + rows[i][0].tree.nodes[rows[i][1]].response_ids for i in first],
                    [rows[i][0].features for i in first])
                if why is not None:
                    raise RuntimeError(f"TopNWorker: {why}")
                for j, i in enumerate(first):
                    ctx[i], logits[i] = got[j], lg[j]
            if later:
                parents = [self.prev[(keys[i][0], keys[i][1], keys[i][2][:-1])] for i in later]
                got, lg = self.runner.extend(parents, [[keys[i][2][-1]] for i in later])
                for j, i in enumerate(later):
                    ctx[i], logits[i] = got[j], lg[j]
            self.prev = dict(zip(keys, ctx))
            top = torch.log_softmax(torch.stack(logits), -1).topk(self.n)
        return [list(zip(ix, v)) for ix, v in zip(top.indices.tolist(), top.values.tolist())]


def vllm_topn(vlm, root, records, max_new: int, depth: int, bounds: dict, lockstep: bool = False, **rules):
    """`tree.engine: vllm`'s group beam trees with a `TopNWorker` in place of vLLM: the refill driver
    (`vllm_beam.grow_topn`), or with lockstep=True the previous driver (the reference's levels over
    `prompt_batch` prompts in chunks of `batch_nodes` nodes, each chunk searched to its end by
    `vllm_beam.search_topn`). -> (trees, TopNStats, sentences)."""
    from dataclasses import replace

    from training.csr.engines import make_tree_engine
    from training.csr.rules import Stats, TreeRules
    from training.csr.vllm_beam import TopNStats, grow_topn, logprobs_needed, search_topn

    cfg = tree_config("vllm", max_new, depth, bounds, **rules)
    stats, tree_stats = TopNStats(), Stats()
    vocab = vlm.model.get_output_embeddings().weight.shape[0]
    tree_rules = TreeRules(vlm, cfg, root)
    n = min(logprobs_needed(tree_rules.spec), vocab)
    worker = TopNWorker(tree_rules, n)
    if not lockstep:
        trees = grow_topn(tree_rules, records, worker, vocab, n, stats, tree_stats=tree_stats)
        return trees, stats, tree_stats.sentences
    # the lockstep driver: the reference engine, each chunk searched to its end from top-N log-probs
    engine = make_tree_engine(replace(cfg, engine="reference"), vlm, root, expand=lambda chunk: search_topn(
        len(chunk), lambda rows: worker([(*chunk[i], t) for i, t in rows]), tree_rules.spec, vocab, n, stats))
    trees = engine.grow(records, progress=False)
    return trees, stats, engine.stats.sentences


def run_engine(vlm, root, records, engine: str, max_new: int, depth: int, warm: bool = True, bounds: dict | None = None,
               **rules) -> tuple[dict, list]:
    """One engine's trees of `records` and its counters (bounds: the count caps; None: `tree_config`'s)."""
    from training.csr.engines import make_tree_engine

    cfg = tree_config(engine, max_new, depth, bounds, **rules)
    if warm:  # allocations, kernels
        make_tree_engine(cfg, vlm, root).grow(records[:1], progress=False)
    gen = make_tree_engine(cfg, vlm, root)
    hooks = Hooks(vlm.model)
    t0 = time.perf_counter()
    trees = gen.grow(records, progress=False)
    dt = time.perf_counter() - t0
    hooks.close()
    n, s = len(records), gen.stats.sentences
    steps = hooks.forwards if engine == "reference" else gen.stats.steps
    host = hooks.decode_rows * hooks.vocab * 4 if engine == "reference" else gen.stats.host_bytes
    expanded = [(t, x) for t in trees for x in t.nodes[1:] if x.children]
    sentence_tokens = sum(len(x.response_ids) - len(t.nodes[x.parent].response_ids) for t, x in expanded)
    out = {"seconds": dt, "sentences": s, "sentences_per_s": s / dt, "forwards": hooks.forwards,
           "forwards_per_1k": 1000 * hooks.forwards / s, "rows_per_forward": hooks.rows / hooks.forwards,
           "vision_per_prompt": hooks.images / n, "prefill_tokens": hooks.prefill_tokens,
           "prefill_per_sentence": hooks.prefill_tokens / s, "host_bytes_per_step": host / max(steps, 1),
           "search_steps": steps,
           "expanded_nodes": len(expanded), "expanded_sentence_tokens": sentence_tokens,
           "prompt_tokens": sum(len(t.prompt_ids) for t in trees)}
    if engine == "pool":
        st = gen.stats
        out.update(node_prefill_tokens=st.prefill_tokens - st.prompt_tokens, nodes_prefilled=st.nodes_prefilled,
                   peak_kv_tokens=st.peak_tokens, node_kv_mean=st.node_kv_tokens / max(st.nodes_searched, 1),
                   node_kv_max=st.node_kv_max, nodes_searched=st.nodes_searched)
    return out, trees


def bench_inputs(tmp: Path, n: int, ckpt: str | None, **build) -> tuple[str, list[dict]]:
    """(checkpoint, records) of the CSR benches: the tiny kit checkpoint built in `tmp` unless one is given
    (`build`: `build_tiny_vlm`'s arguments), `n` solid-colour 64x64 PNGs (content does not change the cost)
    and one record per image."""
    from PIL import Image

    if ckpt is None:
        from evalsuite.kit.tiny import build_tiny_vlm

        ckpt = str(build_tiny_vlm(tmp / "tiny-vlm", seed=0, **build))
    for i in range(n):
        Image.new("RGB", (64, 64), ((37 * i) % 256, (91 * i) % 256, (53 * i) % 256)).save(tmp / f"{i}.png")
    return ckpt, [{"id": str(i), "image": f"{i}.png", "question": "Describe the image."} for i in range(n)]

def run(ckpt: str | None, sizes: list[int], max_new: int, depth: int, device: str, dtype: str | None) -> dict:
    import torch

    from evalsuite.models.vlm import load_vlm
    from bench.tree_diff import differences

    tmp = Path(tempfile.mkdtemp(prefix="csr_bench_"))
    ckpt, records = bench_inputs(tmp, max(sizes), ckpt)
    vlm = load_vlm(ckpt, device=device, dtype=dtype)
    import os

    out: dict = {"ckpt": ckpt, "max_new_tokens": max_new, "max_depth": depth, "device": device,
                 "threads": torch.get_num_threads(), "sizes": {}, "load": os.getloadavg()[0], "cpus": os.cpu_count()}
    for n in sizes:
        res, trees = {}, {}
        for engine in ("reference", "pool"):
            res[engine], trees[engine] = run_engine(vlm, tmp, records[:n], engine, max_new, depth)
        diffs = differences(trees["reference"], trees["pool"])
        for d in diffs:
            print(f"trees differ: prompt {d.tree}, node {d.node}, {d.what}, score gap {d.gap:.3g}"
                  f" ({'near-tie' if d.near_tie() else 'NOT a near-tie'})")
        res["differing_trees"] = len(diffs)
        res["all_near_ties"] = all(d.near_tie() for d in diffs)
        res["speedup"] = res["reference"]["seconds"] / res["pool"]["seconds"]
        res["vllm"], refs = {}, {(): trees["reference"]}
        for name, bounds, lockstep, rules in VLLM_RUNS:
            key = tuple(sorted(rules.items()))
            if key not in refs:
                refs[key] = run_engine(vlm, tmp, records[:n], "reference", max_new, depth, warm=False, **rules)[1]
            t0 = time.perf_counter()
            got, st, s = vllm_topn(vlm, tmp, records[:n], max_new, depth, bounds, lockstep=lockstep, **rules)
            diffs = differences(refs[key], got)
            for d in diffs:  # not counted against the exit status: see the note under the vLLM table
                print(f"{name}: trees differ: prompt {d.tree}, node {d.node}, {d.what}, score gap {d.gap:.3g}")
            res["vllm"][name] = {"calls": st.calls, "calls_per_1k": 1000 * st.calls / s, "sentences": s,
                                 "requests_per_call": st.requests / st.calls, "max_requests": st.max_requests,
                                 "beam_rows_per_call": st.beam_rows / st.calls, "differing_trees": len(diffs),
                                 "seconds": time.perf_counter() - t0}
        out["sizes"][n] = res
    return out


# (label, bounds, lockstep, rules) of the `tree.engine: vllm` runs with a TopNWorker: the previous driver (levels
# in lockstep, chunked) and the refill driver, at the presets' bounds and with every prompt resident; and at the
# presets' bounds under `stop: sentence_marks` (sentences of more varied lengths: what refill recovers)
SENTENCE_MARKS = {"stop": "sentence_marks"}
VLLM_RUNS = (("lockstep, 8 / 24", PRESET_BOUNDS, True, {}), ("refill, 8 / 24", PRESET_BOUNDS, False, {}),
             ("lockstep, all resident", ALL_RESIDENT, True, {}), ("refill, all resident", ALL_RESIDENT, False, {}),
             ("lockstep, 8 / 24, sentence_marks", PRESET_BOUNDS, True, SENTENCE_MARKS),
             ("refill, 8 / 24, sentence_marks", PRESET_BOUNDS, False, SENTENCE_MARKS))
VLLM_ROWS = (("worker calls", "calls", "d"), ("calls per 1,000 sentences", "calls_per_1k", ".1f"),
             ("requests per call", "requests_per_call", ".1f"), ("most requests in a call", "max_requests", "d"),
             ("beam rows per call", "beam_rows_per_call", ".1f"), ("trees differing from the reference", "differing_trees", "d"))

ROWS = (("wall seconds", "seconds", ".2f"), ("candidate sentences", "sentences", "d"),
        ("sentences/s", "sentences_per_s", ".1f"), ("model forwards", "forwards", "d"),
        ("forwards per 1,000 sentences", "forwards_per_1k", ".1f"), ("mean rows per forward", "rows_per_forward", ".1f"),
        ("vision-tower images per prompt", "vision_per_prompt", ".2f"),
        ("prefill tokens per sentence", "prefill_per_sentence", ".1f"),
        ("host bytes per search step", "host_bytes_per_step", ",.0f"))


def to_markdown(r: dict) -> str:
    lines = ["## CSR tree generation (`bench/csr_generate.py`)", "",
             f"Machine: {platform.processor() or platform.machine()}, {r.get('cpus')} CPUs, load average "
             f"{r.get('load', float('nan')):.1f} at the start (a shared machine: wall times are noisy), device "
             f"{r['device']}, torch threads {r['threads']}. "
             f"Tiny kit checkpoint, released rules (5 beams in 5 groups, penalty 3.0, stop at \".\", max_chars 1024, "
             f"pruning 1 best + 2 worst), max_new_tokens {r['max_new_tokens']}, max_depth {r['max_depth']}. "
             "`reference` = `tree.engine: reference` at the earlier preset bounds (prompt_batch 8, batch_nodes 24); "
             "`pool` = `tree.engine: pool` at configs/csr.yaml's bounds (no count caps, `kv_budget: auto`: every "
             "prompt resident here). Counted with forward hooks on "
             "the model and its vision tower.", ""]
    for n, res in r["sizes"].items():
        ref, pool = res["reference"], res["pool"]
        lines += [f"**{n} prompts**", "", "| | reference | pool |", "|---|---|---|"]
        lines += [f"| {label} | {format(ref[k], f)} | {format(pool[k], f)} |" for label, k, f in ROWS]
        lines += ["", f"Speed-up {res['speedup']:.2f}x; trees differing: {res['differing_trees']} of {n}"
                  f"{' (all near-ties)' if res['differing_trees'] and res['all_near_ties'] else ''}. "
                  f"Pool: {pool['nodes_prefilled']} non-root nodes prefilled with {pool['node_prefill_tokens']} tokens = "
                  f"the {pool['expanded_sentence_tokens']} tokens of their own sentences "
                  f"({pool['expanded_nodes']} expanded nodes); the prompts' {pool['prompt_tokens']} tokens once; "
                  f"peak KV {pool['peak_kv_tokens']:,} tokens.", ""]
    for n, res in r["sizes"].items():
        v = res["vllm"]
        lines += [f"**`tree.engine: vllm` (group beam from top-N log-probs), {n} prompts, `TopNWorker` in place of vLLM**",
                  "", "| | " + " | ".join(v) + " |", "|---" * (len(v) + 1) + "|"]
        lines += [f"| {label} | " + " | ".join(format(x[k], f) for x in v.values()) + " |" for label, k, f in VLLM_ROWS]
        lines.append("")
    lines += ["`lockstep` is the previous vLLM driver (the reference's levels over `prompt_batch` prompts, chunks of "
              "`batch_nodes` nodes, one call per search step: its calls are the reference's forwards at the same "
              "bounds); `refill` is `vllm_beam.grow_topn` (the pool's scheduling: one call per step carrying every "
              "node searching). `8 / 24` = the earlier preset's prompt_batch / batch_nodes; `all resident` = the pool "
              "column's bounds (configs/csr.yaml's: no count caps); `sentence_marks`: `stop: sentence_marks` instead of the released stop (its trees compared "
              "with the reference's under the same rule). Requests = distinct rows (a node's identical beams are one "
              "request). A tree of the top-N search that differs from the reference's parts where two candidates' running "
              "scores tie exactly in float32: `torch.topk` may order that tie differently over the top-N tensor than "
              "over the full vocabulary (docs/csr-engine.md \"On vLLM\"); both drivers give the same trees.", ""]
    d, t = r["max_depth"], r["max_new_tokens"]
    lines += [f"Forwards have a floor: a level's nodes come from its parent level's pruning, so one tree needs "
              f"its {d} levels one after the other, each as many forwards as its longest sentence has tokens "
              f"(here up to {t}: the tiny model rarely says \".\", so most sentences run to the cap), i.e. up to "
              f"{d} x {t} = {d * t} forwards whatever the batching. With few prompts that floor is the count "
              f"(16 prompts: {d * t} forwards for ~750 sentences, ~106 per 1,000, half the reference's lockstep); "
              f"with more prompts than that the pool fills its rows from other prompts and the count per "
              f"1,000 sentences falls with the prompt count. Wall time on this CPU is Python- and op-bound "
              f"for both engines (a 228k-parameter model); the counters are what carries over to a GPU.", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", default=None)
    ap.add_argument("--prompts", default="16,256", help="comma-separated prompt counts")
    ap.add_argument("--max-new-tokens", type=int, default=20)
    ap.add_argument("--max-depth", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--write", default=None, help="write the markdown section into this file")
    args = ap.parse_args()
    import torch

    if args.device == "cpu":
        torch.set_num_threads(1)
    r = run(args.ckpt, [int(x) for x in args.prompts.split(",")], args.max_new_tokens, args.max_depth,
            args.device, args.dtype)
    md = to_markdown(r)
    print(md)
    if args.write:
        from evalsuite.files import write_text_atomic

        path = Path(args.write)
        old = path.read_text() if path.exists() else "# Benchmarks\n\n"
        head = "## CSR tree generation (`bench/csr_generate.py`)"
        if head in old:  # replace our section in place, keep the rest of the file
            start = old.index(head)
            nxt = old.find("\n## ", start + 1)
            new = old[:start] + md.rstrip() + "\n" + (old[nxt:] if nxt >= 0 else "")
        else:
            new = old.rstrip() + "\n\n" + md
        write_text_atomic(path, new)
    return 0 if all(res["all_near_ties"] for res in r["sizes"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
