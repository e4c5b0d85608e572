"""Single-GPU throughput of evaluation, CSR tree generation and LoRA DPO on random-init 7B-shaped VLMs.

    python bench/gpu_figures.py [--arch llava|qwen2_vl|both] [--tiny] [--out FIGURES.json]

Part 1 of bench/gpu.sh. Per architecture (LLaVA-1.5-7B and Qwen2-VL-7B shapes, random weights built
on the GPU in bf16 by bench/gpu_models.py; nothing is downloaded or read from disk):
  * eval: `evalsuite.models.vlm.generate` (prompt rendering, image preparation, encoding, suppressed
    tokens, decoding: the shared input path) against plain `model.generate` on the same processor
    outputs (encoded before the clock starts), same batch size; EOS is masked until the last step
    (`min_new_tokens = max_new_tokens`) so both sides generate exactly the same tokens. New tokens/s
    each and their ratio;
  * csr: `training.csr.engines.make_tree_engine` (5 beams in 5 groups, pruning 1 best + 2 worst) on a
    few prompts with `tree.engine: reference`, and on 64 prompts with `tree.engine: pool` (continuous
    refill, prefix reuse, `kv_budget: auto`): candidate sentences (nodes)/s, candidate tokens/s,
    forwards per 1,000 sentences, and the hours one 12,856-prompt CSR iteration would take at that rate
    (released prompt set, ~100 candidate sentences per tree: 5 at depth 1, then 3 kept x 5 per depth
    over ~6 sentences a caption; docs/multi-gpu.md scales it to 4 and 8 GPUs);
  * dpo: `training.trainers.dpo.build_dpo_trainer` with LoRA (r 128, alpha 256, every language-model
    Linear), gradient checkpointing, reference = adapter off, on random same-length pairs: seconds
    per step after warm-up steps (step end to step end: data, forward, backward, optimizer), peak
    `torch.cuda.max_memory_allocated`.
MFU = model FLOPs / seconds / the device's bf16 dense peak (table in bench/gpu_models.py; an unlisted
device or the CPU prints n/a). Model FLOPs, counted by hooks on what actually ran (details there):
    k * N_body * positions + k * N_head * projected positions + 2 * N_vision * image patches,
    k = 2 without gradients (generation, the DPO reference pass), 6 with (the DPO policy pass),
N_body = language-model parameters without the embedding table; attention scores are left out. TRL's
fused LM head reads the head's weight without calling it, so DPO adds 8 * N_head * scored completion
positions per step (reference 2 + policy 6).
The random weights answer noise: that is irrelevant to throughput, the shapes and token counts are real.
`--tiny` runs the same code on tiny shapes (CPU, seconds): tests/integration/test_gpu_figures.py.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

QUESTION = "Describe the image in detail."
# One CSR iteration on the released prompt set: 12,856 prompts x ~100 candidate sentences per tree.
ITERATION_SENTENCES = 12_856 * 100


@dataclass(frozen=True)
class Sizes:
    eval_batch: int = 8
    eval_batches: int = 2
    new_tokens: int = 128
    csr_prompts: int = 4
    csr_new_tokens: int = 70
    csr_depth: int = 3
    csr_pool_prompts: int = 64
    dpo_batch: int = 8
    dpo_warmup: int = 2
    dpo_steps: int = 5
    answer_words: int = 48
    lora_r: int = 128
    lora_alpha: int = 256


TINY = Sizes(eval_batch=2, eval_batches=1, new_tokens=8, csr_prompts=2, csr_new_tokens=6, csr_depth=2, csr_pool_prompts=4,
             dpo_batch=2, dpo_warmup=1, dpo_steps=2, answer_words=8, lora_r=8, lora_alpha=16)


class Clock:
    """Wall seconds between `start()` and `stop()`, with the device drained at both ends."""

    def __init__(self, device: str):
        import torch

        self.sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def start(self) -> None:
        self.sync()
        self.t0 = time.perf_counter()

    def stop(self) -> float:
        self.sync()
        return time.perf_counter() - self.t0


def _row(arch, figure, value, unit, flops=None, seconds=None, peak=None, **extra) -> dict:
    achieved = flops / seconds if flops is not None and seconds else None
    mfu = achieved / peak if achieved is not None and peak else None
    return {"arch": arch, "figure": figure, "value": value, "unit": unit, "seconds": seconds, "flops": flops,
            "tflops_per_s": achieved and achieved / 1e12, "mfu": mfu, **extra}


def _images(side: int, n: int, root: Path) -> list[str]:
    """`n` solid-colour side x side PNGs under `root` (the content does not change the cost)."""
    from PIL import Image

    for i in range(n):
        Image.new("RGB", (side, side), ((37 * i) % 256, (91 * i) % 256, (53 * i) % 256)).save(root / f"{i}.png")
    return [f"{i}.png" for i in range(n)]


def measure_eval(arch, vlm, counter, s: Sizes, images, clock, peak) -> list[dict]:
    import torch
    from PIL import Image

    from evalsuite.gen_settings import GenConfig
    from evalsuite.models.vlm import encode_batch, generate
    from evalsuite.types import GenRequest

    pics = [Image.open(p).convert("RGB") for p in images]
    reqs = [GenRequest(key=str(i), image=pics[i % len(pics)], prompt=QUESTION)
            for i in range(s.eval_batch * s.eval_batches)]
    batches = [reqs[i:i + s.eval_batch] for i in range(0, len(reqs), s.eval_batch)]
    model, n = vlm.model, s.new_tokens

    def hf(enc, tokens):
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                                 pad_token_id=vlm.tokenizer.pad_token_id)
        if out.shape[1] - enc["input_ids"].shape[1] != tokens:
            raise RuntimeError(f"plain generate made {out.shape[1] - enc['input_ids'].shape[1]} tokens, not {tokens}")

    encoded = [encode_batch(vlm, b) for b in batches]
    model.generation_config.min_new_tokens = n  # EOS masked until token n: both paths make n per row
    runs = {"evalsuite": lambda: generate(vlm, reqs, GenConfig(max_new_tokens=n), batch_size=s.eval_batch,
                                          progress=False),
            "plain HF": lambda: [hf(e, n) for e in encoded]}
    # Warm-up at the timed length (kernels; the caching allocator's blocks for the growing KV cache),
    # then each side timed twice, alternating, the faster kept: neither side pays for running first.
    best: dict[str, tuple[float, float]] = {}
    try:
        for run in runs.values():
            run()
        for _ in range(2):
            for name, run in runs.items():
                counter.reset()
                clock.start()
                run()
                dt = clock.stop()
                if counter.lm_forwards != len(batches) * n:  # n forwards per batch = n tokens per row
                    raise RuntimeError(f"eval {name}: {counter.lm_forwards} forwards, expected {len(batches) * n}")
                if name not in best or dt < best[name][0]:
                    best[name] = (dt, counter.flops)
    finally:  # the CSR and DPO parts run on this model next, also after a failure here
        model.generation_config.min_new_tokens = None
    rows, per_s = [], {}
    for name, (dt, flops) in best.items():
        per_s[name] = len(reqs) * n / dt
        rows.append(_row(arch, f"eval {name} generate (batch {s.eval_batch}, {n} new)", per_s[name], "tok/s",
                         flops, dt, peak, tokens=len(reqs) * n))
    rows.append(_row(arch, "eval evalsuite / plain HF", per_s["evalsuite"] / per_s["plain HF"], "x"))
    return rows


def measure_csr(arch, vlm, counter, s: Sizes, images, root, clock, peak) -> list[dict]:
    from training.csr.config import TreeConfig
    from training.csr.engines import make_tree_engine

    records = [{"id": str(i), "image": images[i % len(images)], "question": QUESTION} for i in range(s.csr_prompts)]
    # junk filtered after growth (the released rule) and no sibling dedupe: the work done does not
    # depend on what the random weights happen to say
    cfg = TreeConfig(max_new_tokens=s.csr_new_tokens, max_depth=s.csr_depth, stop="sentence_marks", max_chars=None,
                     batch_nodes=64, prompt_batch=s.csr_prompts, dedupe_siblings=False, junk_filter="after_pruning",
                     engine="reference")
    make_tree_engine(replace(cfg, max_new_tokens=2, max_depth=1), vlm, root).grow(records[:1], progress=False)
    rows = []
    pool_records = [{"id": str(i), "image": images[i % len(images)], "question": QUESTION} for i in range(s.csr_pool_prompts)]
    pool_cfg = replace(cfg, engine="pool", batch_nodes=None, prompt_batch=None)
    make_tree_engine(replace(pool_cfg, max_new_tokens=2, max_depth=1), vlm, root).grow(records[:1], progress=False)
    for label, c, recs in (("csr tree", cfg, records), ("csr pool tree", pool_cfg, pool_records)):
        gen = make_tree_engine(c, vlm, root)
        forwards = [0]
        hook = vlm.model.register_forward_pre_hook(lambda *_: forwards.__setitem__(0, forwards[0] + 1))
        counter.reset()
        _reset_peak()
        clock.start()
        try:
            trees = gen.grow(recs, progress=False)
            dt = clock.stop()
        finally:
            hook.remove()
        nodes = gen.stats.sentences
        tokens = sum(len(node.sentence_ids) for t in trees for node in t.nodes[1:])
        what = f"{len(recs)} prompts, 5 beams, depth {s.csr_depth}, {s.csr_new_tokens} max new, engine {c.engine}"
        rows += [_row(arch, f"{label} nodes ({what})", nodes / dt, "nodes/s", counter.flops, dt, peak, nodes=nodes),
                 _row(arch, f"{label} candidate tokens", tokens / dt, "tok/s", tokens=tokens),
                 _row(arch, f"{label} forwards per 1,000 sentences", 1000 * forwards[0] / nodes, "fwd", forwards=forwards[0]),
                 _row(arch, f"{label} est. hours per 12,856-prompt iteration (100 sentences a tree)",
                      ITERATION_SENTENCES / (nodes / dt) / 3600, "h"),
                 _row(arch, f"{label} peak memory allocated", _peak_gib(), "GiB")]
    try:  # its own FAILED row: the reference and pool figures above are kept
        rows += measure_csr_vllm(arch, vlm, replace(pool_cfg, engine="vllm"), pool_records, root, clock)
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        rows.append(_row(arch, f"csr vllm FAILED: {type(exc).__name__}: {exc}"[:200], None, "", failed=True))
    return rows


def _reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def _peak_gib() -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None


def measure_csr_vllm(arch, vlm, cfg, records, root: Path, clock) -> list[dict]:
    """The pool's prompts on `tree.engine: vllm`, as the CSR loop runs it: the weights saved (safetensors),
    the HF model off the GPU while the worker runs, the worker's own KV capacity bounding the pool. GPU only
    (vLLM's CPU kernels are not the figure), LLaVA only (the 8-minute bound), and only where a vLLM
    environment is found ($EVALSUITE_VLLM_PYTHON; the lent machine cannot install one): otherwise one
    'skipped' row saying why. Memory: the device memory in use while the worker holds its reservation."""
    import torch

    from evalsuite.engines.vllm_process import VllmOptions, resolve_engine
    from evalsuite.errors import UserError
    from evalsuite.models.vlm import load_vlm
    from training.csr.engines import make_tree_engine
    from training.csr.vllm_expand import VllmSampler

    def skipped(why: str) -> list[dict]:
        return [_row(arch, f"csr vllm tree skipped: {why}", None, "")]

    if not torch.cuda.is_available():
        return skipped("no CUDA device")
    if arch != "llava":
        return skipped("measured on llava only (the script's time bound)")
    options = VllmOptions(gpu_memory_utilization=0.85)
    try:
        resolve_engine("vllm", options)
    except UserError as exc:
        return skipped(str(exc)[:120])
    ckpt = root / "ckpt_vllm"
    vlm.model.save_pretrained(ckpt, safe_serialization=True)
    vlm.processor.save_pretrained(ckpt)
    vlm.model.to("cpu")  # the worker holds the weights; this process keeps none on the GPU meanwhile
    torch.cuda.empty_cache()
    try:
        shell = load_vlm(ckpt, device="cuda", dtype="bfloat16", weights=False)
        with VllmSampler.open(shell.inputs, ckpt, cfg, options, dtype="bfloat16", device="cuda",
                              log_path=root / "vllm_worker.log") as sampler:
            engine = make_tree_engine(cfg, shell, root, sampler=sampler)
            clock.start()
            engine.grow(records, progress=False)
            dt = clock.stop()
            free, total = torch.cuda.mem_get_info()
            calls = sampler.beam_stats.calls
        nodes = engine.stats.sentences
    finally:
        vlm.model.to("cuda")
    what = f"{len(records)} prompts, engine vllm"
    return [_row(arch, f"csr vllm tree nodes ({what})", nodes / dt, "nodes/s", nodes=nodes),
            _row(arch, "csr vllm tree calls per 1,000 sentences", 1000 * calls / nodes, "calls", calls=calls),
            _row(arch, "csr vllm tree est. hours per 12,856-prompt iteration (100 sentences a tree)",
                 ITERATION_SENTENCES / (nodes / dt) / 3600, "h"),
            _row(arch, "csr vllm tree device memory in use", (total - free) / 2**30, "GiB")]


def _pairs(vlm, s: Sizes, images, root: Path) -> Path:
    """Same-length random pairs (one vocabulary word = one token), so every batch has the same shape."""
    import random

    rng = random.Random(0)
    words = sorted(w for w in vlm.tokenizer.get_vocab() if w.isalnum())
    say = lambda: " ".join(rng.choice(words) for _ in range(s.answer_words))
    pairs = [{"image": images[i % len(images)], "prompt": QUESTION, "chosen": say(), "rejected": say()}
             for i in range(s.dpo_batch)]
    path = root / "pairs.json"
    path.write_text(json.dumps(pairs))
    return path


def measure_dpo(arch, vlm, counter, s: Sizes, images, root, clock, peak) -> list[dict]:
    import torch
    from transformers import PrinterCallback, TrainerCallback

    from training.config import load_config
    from training.data import load_examples
    from training.trainers.dpo import build_dpo_trainer
    from training.trainers.model import freeze_vision_tower

    cuda = vlm.device.startswith("cuda")
    vlm.model.config.save_pretrained(root / "model")  # the config check wants a checkpoint dir; weights stay in memory
    cfg = load_config({
        "method": "dpo", "dataset_name": "plain_dpo", "model_name_or_path": str(root / "model"),
        "data_path": str(_pairs(vlm, s, images, root)),
        "image_root": str(root), "output_dir": str(root / "dpo"), "eval_split": 0.0, "max_length": 2048,
        "max_prompt_length": 1024, "use_lora": True, "lora_r": s.lora_r,
        "lora_alpha": s.lora_alpha, "lora_dropout": 0.05, "lora_target_modules": "auto", "lora_scope": "language_model",
        "freeze_vision_tower": True,
        "activation_checkpointing": True, "bf16": cuda, "use_cpu": not cuda, "learning_rate": 1e-6,
        "max_steps": s.dpo_warmup + s.dpo_steps, "per_device_train_batch_size": s.dpo_batch,
        "logging_steps": s.dpo_warmup + s.dpo_steps, "save_strategy": "no", "report_to": "none",
        "dataloader_num_workers": 0, "disable_tqdm": True, "seed": 0})
    train_ds, _, _ = load_examples(cfg)
    freeze_vision_tower(vlm.model)
    trainer = build_dpo_trainer(cfg, vlm.model, vlm.processor, train_ds)
    batch = trainer.data_collator([train_ds[i] for i in range(s.dpo_batch)])
    scored = int(batch["completion_mask"][:, 1:].sum())  # positions TRL's fused head projects, per forward
    timed: list[tuple[float, float]] = []  # (seconds, FLOPs) of the timed steps

    class Steps(TrainerCallback):  # step end to step end: everything a step costs, data included
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == s.dpo_warmup:
                counter.reset()
                clock.start()
            elif state.global_step == s.dpo_warmup + s.dpo_steps:
                timed.append((clock.stop(), counter.flops))

    trainer.add_callback(Steps())
    trainer.remove_callback(PrinterCallback)  # the figures are the output, not the per-step log dicts
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    dt, flops = timed[0]
    flops += s.dpo_steps * 8 * counter.n_head * scored
    peak_mem = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    trainer.accelerator.free_memory()  # drop the prepared model and optimizer before the next architecture
    what = f"{s.dpo_batch} pairs, LoRA r {s.lora_r}, ckpt, {s.dpo_steps} steps after {s.dpo_warmup}"
    return [_row(arch, f"dpo step ({what})", dt / s.dpo_steps, "s/step", flops, dt, peak,
                 trainable_params=trainable),
            _row(arch, "dpo peak memory allocated", peak_mem, "GiB")]


def run_arch(arch: str, tiny: bool, device: str, peak) -> list[dict]:
    import gc

    import torch

    from bench.gpu_models import SHAPES, FlopCounter, build_vlm

    s = TINY if tiny else Sizes()
    clock = Clock(device)
    t0 = time.perf_counter()
    vlm = build_vlm(arch, tiny, device, torch.bfloat16 if device.startswith("cuda") else torch.float32)
    clock.sync()  # the init kernels run asynchronously
    rows = [_row(arch, f"model build (random init, {sum(p.numel() for p in vlm.model.parameters()):,} params)",
                 time.perf_counter() - t0, "s")]
    counter = FlopCounter(vlm.model)
    with tempfile.TemporaryDirectory(prefix=f"gpu_figures_{arch}_") as tmp:
        root = Path(tmp)
        side = SHAPES[arch]["tiny" if tiny else "full"]["image"]
        images = _images(side, max(s.eval_batch, s.csr_prompts, s.dpo_batch), root)
        # F821 below is pyflakes reading the lambdas after `del vlm, counter` further down; they all run in
        # the loop that follows, while both names are bound
        parts = (("eval", lambda: measure_eval(arch, vlm, counter, s, [root / i for i in images], clock, peak)),  # noqa: F821
                 ("csr", lambda: measure_csr(arch, vlm, counter, s, images, root, clock, peak)),  # noqa: F821
                 ("dpo", lambda: measure_dpo(arch, vlm, counter, s, images, root, clock, peak)))  # noqa: F821 - last: LoRA in place
        for part, measure in parts:
            # a failing part is reported and the others still measured: a GPU lease is short and one run
            # should bring back every figure it can
            try:
                rows += measure()
            except Exception as exc:  # noqa: BLE001 - reported as a FAILED row and in the exit status
                traceback.print_exc()
                rows.append(_row(arch, f"{part} FAILED: {type(exc).__name__}: {exc}"[:200], None, "", failed=True))
    counter.close()
    del vlm, counter
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rows


def _fmt(v, spec: str, width: int = 0) -> str:
    return f"{'n/a':>{width}}" if v is None else format(v, f"{width}{spec}")


def table(rows: list[dict]) -> str:
    lines = [f"{'arch':<10}{'figure':<70}{'value':>12} {'unit':<8}{'TFLOP/s':>9}{'MFU':>8}"]
    for r in rows:
        tf = "" if r["flops"] is None else _fmt(r["tflops_per_s"], ".3g")
        mfu = "" if r["flops"] is None else "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
        lines.append(f"{r['arch']:<10}{r['figure']:<70}{_fmt(r['value'], '.4g', 12)} {r['unit']:<8}{tf:>9}{mfu:>8}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu_figures.py", description=__doc__.splitlines()[0])
    p.add_argument("--arch", choices=("llava", "qwen2_vl", "both"), default="both")
    p.add_argument("--tiny", action="store_true", help="tiny shapes, same code (CPU-sized, seconds)")
    p.add_argument("--out", default=None, help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    import warnings

    import torch
    import transformers

    from bench.gpu_models import ARCHS, peak_flops

    # transformers 5 deprecation notices raised inside TRL/PEFT calls, once per step: not ours to fix here
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.tiny:
        p.error("the 7B-shaped figures need a CUDA GPU (none visible); --tiny runs the same code on tiny shapes")
    if device == "cpu":
        torch.set_num_threads(1)
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    peak = peak_flops(name)
    print(f"gpu_figures: device {name}, bf16 dense peak {_fmt(peak and peak / 1e12, '.0f')} TFLOP/s, "
          f"{'tiny' if args.tiny else '7B'} shapes, torch {torch.__version__}, transformers {transformers.__version__}",
          flush=True)
    from evalsuite.files import write_text_atomic

    meta = {"device": name, "peak_flops": peak, "tiny": args.tiny, "torch": torch.__version__,
            "transformers": transformers.__version__}
    rows: list[dict] = []
    for arch in ARCHS if args.arch == "both" else (args.arch,):
        arch_rows = run_arch(arch, args.tiny, device, peak)
        rows += arch_rows
        print(table(arch_rows), flush=True)  # per architecture: a run stopped later keeps these
        if args.out:
            write_text_atomic(args.out, json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    return 1 if any(r.get("failed") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
