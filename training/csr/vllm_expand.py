"""The CSR expanders on vLLM (`tree.engine: vllm`; docs/engines.md "CSR trees"): `sample`, and `group_beam`
stepped one token at a time from top-N log-probs (training/csr/vllm_beam.py, where its exactness is argued).

    with VllmSampler.open(inputs, ckpt, cfg.tree, cfg.vllm, log_path=d / "vllm_worker.log") as sampler:
        make_tree_engine(cfg.tree, vlm, image_root, sampler=sampler).grow(records)

What `training.csr.search.sample_search` computes, on vLLM: per node, `num_samples` continuations of
prompt + the node's response, each ending at its first stop id (the sentence end; EOS too under
`stop: sentence_marks`, an ordinary token under `stop: released`) or at `max_new_tokens`, the suppressed
ids never drawn, and scored by the mean log-prob of its tokens (the model's log-softmax before
temperature / top-p, as sample_search scores them). The prompts are the project's: the rendered prompt
tokenized with one image placeholder (vLLM expands it; the expansion is checked against the tree's
processor ids) followed by the node's response ids; the image as its exact pixels. A tree's nodes share
their prompt and image, so vLLM's prefix cache serves their common prefix (in blocks of 128 tokens on CPU).

What differs from the HF expander: the draws (vLLM's sampler and its per-request seeds, from the tree
seed and node key, against torch generators per row), so the trees differ; their distribution is the same.

`group_beam` (`VllmSampler.grow`, run by `vllm_beam.VllmTreeEngine`): whole trees under the pool engine's
continuous refill (`vllm_beam.grow_topn`): every search step is ONE worker call carrying a `max_tokens=1`
request per distinct running row (prompt + node response + the beam's tokens) of every node searching, of
any prompt and level, asking the top-N raw log-probs, N = `vllm_beam.logprobs_needed`; the worker's KV
capacity (where it reports one) and the optional caps `tree.prompt_batch` / `tree.batch_nodes` bound the
prompts resident and the nodes searching. The prefix cache holds each node's context once for its beams. The
trees are HF's up to the engines' rounding of the log-probs (near-ties). Counts (calls, requests per call)
are logged at `close()`.
"""
from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


class VllmSampler:
    """A vLLM worker for one checkpoint + the encoding of CSR prompts for it."""

    def __init__(self, generator, tree_cfg):
        from training.csr.vllm_beam import TopNStats

        self.generator, self.cfg = generator, tree_cfg
        self.beam_stats = TopNStats()

    @classmethod
    def open(cls, inputs, ckpt: str | Path, tree_cfg, options=None, dtype: str = "float32", device: str = "cpu", *,
             log_path: str | Path) -> VllmSampler:
        """inputs: the checkpoint's ModelInputs (its processor: no weights are needed here); options: the
        CSR config's `vllm:` section (evalsuite.engines.vllm_process.VllmOptions)."""
        from evalsuite.engines.vllm_generate import VllmGenerator
        from evalsuite.engines.vllm_process import make_worker, resolve_engine

        spec = resolve_engine("vllm", options)
        worker = make_worker(spec, ckpt, dtype=dtype, device=device, log_path=log_path, seed=tree_cfg.seed)
        return cls(VllmGenerator(worker, inputs, ckpt), tree_cfg)

    def __enter__(self) -> VllmSampler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.beam_stats.calls:
            log.info("tree.engine vllm, group_beam: %s", self.beam_stats.line())
        self.generator.worker.close()

    def prompt(self, image, question: str):
        """(ids with one image placeholder, the prepared image) of a CSR prompt."""
        p = self.generator.prompt_ids(question, image, True)
        return p.ids, p.image

    def expand(self, contexts, spec, keys: list[str]):
        """contexts: per node (unexpanded prompt ids, image, tree prompt ids (expanded), response ids).
        -> per node, `num_samples` Hyps best first (training.csr.search.Hyp)."""
        from evalsuite.engines.seeds import stable_seed
        from evalsuite.engines.vllm_process import PromptIds
        from training.csr.search import Hyp

        cfg = self.cfg
        if cfg.expander != "sample":
            raise RuntimeError(f"VllmSampler.expand samples; the {cfg.expander} expander grows trees by VllmSampler.grow")
        prompts = [PromptIds(list(ids) + list(resp), image, list(expanded) + list(resp))
                   for ids, image, expanded, resp in contexts]
        params = {"max_tokens": spec.max_new_tokens, "n": cfg.num_samples, "temperature": cfg.temperature,
                  "top_p": cfg.top_p, "stop_token_ids": list(spec.stop_ids), "suppress_ids": list(spec.suppress_ids),
                  "logprobs": True, "ignore_eos": True, "seeds": [stable_seed(cfg.seed, k) for k in keys]}
        out = []
        for rows in self.generator.worker.generate_ids(prompts, params):
            hyps = [Hyp(tuple(r["ids"]), sum(r["logprobs"]) / len(r["logprobs"]), j) for j, r in enumerate(rows)]
            out.append(sorted(hyps, key=lambda h: -h.score))
        return out

    def logprobs(self, spec) -> int:
        """N of the top-N log-probs the search asks (vllm_beam.logprobs_needed); the worker is started with a
        max_logprobs that allows it, and one that reports less (or log-probs other than raw) is refused."""
        from evalsuite.errors import UserError
        from training.csr.vllm_beam import logprobs_needed

        engine = self.generator.worker
        need = logprobs_needed(spec)
        if not engine.running:
            engine.max_logprobs = max(need, 20)  # 20: vLLM's default
        engine.start()
        info = engine.info
        need = min(need, int(info["vocab"]))
        cap = int(info.get("max_logprobs", 20))
        if 0 <= cap < need:
            raise UserError(f"tree.engine: vllm: the group beam search needs the top {need} log-probs per step "
                            f"(beams, groups, stop and suppressed ids), the vLLM worker allows {cap} (max_logprobs)")
        if info.get("logprobs_mode", "raw_logprobs") != "raw_logprobs":
            raise UserError(f"tree.engine: vllm: the worker returns {info['logprobs_mode']}, the group beam search "
                            "needs raw_logprobs (the model's log-softmax)")
        return need

    def engine_prompt(self, image_root, p):
        """(ids with one image placeholder, prepared image) of a tree's prompt (a rules.Prompt), made once."""
        from evalsuite.files import safe_join

        if p.engine_prompt is None:
            p.engine_prompt = self.prompt(safe_join(image_root, p.tree.image), p.tree.question)
        return p.engine_prompt

    def expander(self, rules):
        """The sampling expander of the reference engine (engines.make_tree_engine): a chunk of (prompt, node) in one call."""
        def expand(chunk):
            return self.expand([(*self.engine_prompt(rules.image_root, p), p.tree.prompt_ids, p.tree.nodes[nid].response_ids)
                                for p, nid in chunk], rules.spec, [f"{p.tree.id}/{nid}" for p, nid in chunk])
        return expand

    def kv_tokens(self) -> int | None:
        """The worker's KV capacity in tokens, where it reports one (None: vLLM bounds its own cache)."""
        v = (getattr(self.generator.worker, "info", None) or {}).get("kv_tokens")
        return int(v) if v else None

    def grow(self, rules, records, progress: bool = False, stats=None):
        """The group beam trees of `records` under `rules` (a rules.TreeRules), in record order (vllm_beam.grow_topn)."""
        from evalsuite.engines.vllm_process import PromptIds
        from training.csr.vllm_beam import grow_topn

        n = self.logprobs(rules.spec)
        engine = self.generator.worker

        def next_topn(rows):
            prompts = []
            for p, nid, toks in rows:
                (ids, image), resp = self.engine_prompt(rules.image_root, p), p.tree.nodes[nid].response_ids
                # a node's first request (no beam tokens yet) checks vLLM's expansion of its context
                expanded = None if toks else list(p.tree.prompt_ids) + resp
                prompts.append(PromptIds(list(ids) + resp + list(toks), image, expanded))
            return engine.next_logprobs(prompts, n, check=any(not toks for _, _, toks in rows))

        return grow_topn(rules, records, next_topn, int(engine.info["vocab"]), n, self.beam_stats, progress,
                         tree_stats=stats, kv_tokens=self.kv_tokens())


def open_sampler(cfg, inputs, ckpt: str | Path, world: int, log_path: Path, device: str = "cpu") -> VllmSampler:
    """The CSR loop's sampler for one iteration's checkpoint (its weights change every iteration), with the
    config's `vllm:` section; inputs: the checkpoint's ModelInputs (no HF weights while the worker runs)."""
    from evalsuite.errors import UserError
    from evalsuite.models.vlm import resolve_dtype

    if world > 1:
        raise UserError("tree.engine: vllm runs in one process; start the CSR loop without torchrun / accelerate")
    device = str(device).split(":")[0]
    return VllmSampler.open(inputs, ckpt, cfg.tree, cfg.vllm, dtype=resolve_dtype(device, cfg.dtype), device=device,
                            log_path=log_path)
