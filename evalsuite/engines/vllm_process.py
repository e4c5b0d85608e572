"""The vLLM worker process: evalsuite/engines/vllm_worker.py in vLLM's own environment, driven over a pipe,
and `vllm.data_parallel_size` of them behind the same `Worker` protocol.

    spec = resolve_engine("vllm", VllmOptions())      # checks the environment, reads its versions (no start)
    worker = make_worker(spec, ckpt, dtype="float32", log_path=OUT / "vllm_worker.log")
    worker.generate_ids([PromptIds(ids, image)], {"max_tokens": 16})   # starts the worker on first use
    worker.close()

The worker gets token ids with ONE image placeholder per image (vLLM's processor expands it) and the image's
exact RGB pixels; the ids the checkpoint's processor expands to are checked against vLLM's. Request mapping
(GenRequest -> ids and sampling params) is evalsuite/engines/vllm_generate.py.

One worker per run: started on first use, closed by `close()`, and by the worker itself when this process
dies (parent-death signal, EOF on its stdin). A worker that dies mid-run is one line (`RunFailure`) naming
its log; answers finished before it are in the resume cache.
"""
from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evalsuite.config import opt
from evalsuite.errors import RunFailure, UserError

log = logging.getLogger(__name__)

WORKER = Path(__file__).resolve().parent / "vllm_worker.py"
SETUP = Path(__file__).resolve().parent / "setup_vllm.sh"
ENV_VAR = "EVALSUITE_VLLM_PYTHON"


def default_env_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "evalsuite" / "vllm-env"


@dataclass
class VllmOptions:
    """The `vllm:` section of a run config (read only with `engine: vllm`)."""

    python: str | None = opt(None, "the vLLM environment's python (null = $EVALSUITE_VLLM_PYTHON, else "
                                   "~/.cache/evalsuite/vllm-env/bin/python, built by make vllm-env)", identity=False)
    max_model_len: int | None = opt(None, "prompt + answer tokens per sequence (null = the model's own limit)")
    kv_cache_gib: float = opt(1.0, "CPU only: VLLM_CPU_KVCACHE_SPACE", identity=False)
    gpu_memory_utilization: float | None = opt(None, "GPU only: share of GPU memory (null = vLLM's 0.9)",
                                               identity=False)
    tensor_parallel_size: int = opt(1, "GPUs one model is split over")
    data_parallel_size: int = opt(1, "model replicas, one worker each (GPUs = tp x dp; GPU only)", identity=False)
    prefix_caching: bool = opt(True, "reuse KV blocks of shared prompt prefixes (answers unchanged)", identity=False)
    start_timeout_s: float = opt(900.0, "seconds for import + engine start (40-50 s on a 2-core CPU)",
                                 identity=False)

    def __post_init__(self) -> None:
        for name in ("max_model_len", "tensor_parallel_size", "data_parallel_size"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise UserError(f"vllm.{name}: must be >= 1, got {getattr(self, name)}")
        if self.kv_cache_gib <= 0:
            raise UserError(f"vllm.kv_cache_gib: must be > 0, got {self.kv_cache_gib}")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise UserError(f"vllm.gpu_memory_utilization: must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.start_timeout_s <= 0:
            raise UserError(f"vllm.start_timeout_s: must be > 0, got {self.start_timeout_s}")


@dataclass(frozen=True)
class EngineSpec:
    """A resolved engine: its name, the python it runs in and the versions that change its answers."""

    name: str                                  # "vllm"
    python: str
    versions: dict = field(default_factory=dict)   # {"package": "vllm-cpu 0.32.0", "torch": ..., "transformers": ...}
    options: VllmOptions = field(default_factory=VllmOptions)

    def identity(self) -> dict:
        """What joins a result's identity and every cache key: the engine and its versions."""
        return {"engine": {"name": self.name, **self.versions}}


def resolve_python(opts: VllmOptions) -> tuple[str, str]:
    """(python, where it was named) of the vLLM environment; a missing one is a UserError saying how to build it."""
    if opts.python:
        py, where = opts.python, "vllm.python"
    elif os.environ.get(ENV_VAR):
        py, where = os.environ[ENV_VAR], ENV_VAR
    else:
        py, where = str(default_env_dir() / "bin" / "python"), "the default vLLM environment"
    if not (Path(py).is_file() and os.access(py, os.X_OK)):
        raise UserError(f"--engine vllm: {where} {py}: no such python; build the environment with `make vllm-env` "
                        f"(or `bash {SETUP.relative_to(SETUP.parents[2])}`), or point {ENV_VAR} / vllm.python at "
                        "another vLLM environment's python")
    return py, where


_VERSIONS: dict[str, dict] = {}

_PROBE = """
import json
from importlib import metadata as m
def v(n):
    try:
        return m.version(n)
    except m.PackageNotFoundError:
        return None
pkg = next((p for p in ("vllm-cpu", "vllm") if v(p)), None)
print(json.dumps({"package": pkg and f"{pkg} {v(pkg)}", "torch": v("torch"), "transformers": v("transformers")}))
"""


def engine_versions(python: str, where: str = "vllm.python") -> dict:
    """{"package", "torch", "transformers"} of the environment (package metadata only: no vLLM import)."""
    if python not in _VERSIONS:
        try:
            out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True)
            versions = json.loads(out.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
            raise UserError(f"--engine vllm: {where} {python}: cannot read its package versions "
                            f"({type(exc).__name__})") from None
        if not versions.get("package"):
            raise UserError(f"--engine vllm: {where} {python}: vLLM is not installed there; run `make vllm-env`")
        _VERSIONS[python] = versions
    return dict(_VERSIONS[python])


def resolve_engine(name: str, opts: VllmOptions | None = None) -> EngineSpec | None:
    """None for `hf`; for `vllm` the checked environment (before any model loads or worker starts)."""
    if name == "hf":
        return None
    if name != "vllm":
        raise UserError(f"engine: {name!r} is not one of hf, vllm")
    opts = opts or VllmOptions()
    python, where = resolve_python(opts)
    return EngineSpec("vllm", python, engine_versions(python, where), opts)


@dataclass
class PromptIds:
    """One prompt for the worker: token ids with ONE placeholder per image (vLLM's processor expands it), the
    prepared PIL image, and `expanded`: the ids the project's processor gives (checked against vLLM's)."""

    ids: list[int]
    image: Any = None
    expanded: list[int] | None = None


def image_payload(image) -> dict | None:
    """The exact RGB pixels of a PIL image (raw bytes: no re-encoding can change them)."""
    if image is None:
        return None
    rgb = image.convert("RGB")
    return {"size": list(rgb.size), "rgb": base64.b64encode(rgb.tobytes()).decode("ascii")}


def vllm_env(cpu: bool) -> dict:
    """The environment of a process started in vLLM's own environment (the eval/CSR worker, a local judge):
    ours without our interpreter's paths, offline, no usage reports; on the CPU build, the CPU target."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    if cpu:
        env.setdefault("VLLM_TARGET_DEVICE", "cpu")
    return env


def _set_parent_death_signal() -> None:  # runs in the child before exec (Linux): die with the parent
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: EOF on stdin still stops the worker
        pass


class VllmWorker:
    """A vLLM worker process for one checkpoint, started on first use."""

    def __init__(self, spec: EngineSpec, ckpt: str | Path, dtype: str = "float32", device: str = "cpu", *,
                 log_path: str | Path, seed: int = 0, gpus: list[str] | None = None,
                 max_model_len: int | None = None):
        self.spec, self.ckpt, self.dtype, self.device, self.seed = spec, str(ckpt), dtype, device, seed
        # tokens per sequence: vllm.max_model_len, else the checkpoint's context (vllm_check.context_limit),
        # the one limit HF generation stops at too (evalsuite/models/vlm.py ContextStop)
        self.max_model_len = spec.options.max_model_len or max_model_len
        self.max_logprobs: int | None = None  # vLLM's cap on logprobs per request (None: vLLM's 20); set before start
        self.gpus = gpus  # a data-parallel replica's GPUs (CUDA_VISIBLE_DEVICES); None = all visible
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}
        self._next = 0
        self._log_fh = None
        self._launched = False
        self._code: int | None = None

    # ------------------------------------------------------------------ life cycle
    def command(self) -> list[str]:
        o = self.spec.options
        cmd = [self.spec.python, str(WORKER), "--model", self.ckpt, "--dtype", self.dtype, "--seed", str(self.seed),
               "--tensor-parallel-size", str(o.tensor_parallel_size)]
        if self.max_model_len is not None:
            cmd += ["--max-model-len", str(self.max_model_len)]
        if o.prefix_caching:
            cmd.append("--prefix-caching")
        if self.device == "cpu":
            cmd.append("--enforce-eager")  # no graph capture on CPU; its compile step only costs start-up time
        if o.gpu_memory_utilization is not None:
            cmd += ["--gpu-memory-utilization", str(o.gpu_memory_utilization)]
        if self.max_logprobs is not None:
            cmd += ["--max-logprobs", str(self.max_logprobs)]
        return cmd

    def env(self) -> dict:
        env = vllm_env(cpu=self.device == "cpu")
        env["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, round(self.spec.options.kv_cache_gib)))
        if self.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus)
        return env

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        if self.running:
            return
        if self._launched:  # a worker that died is not silently replaced: its run fails (and resumes)
            raise self._died()
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the worker process (it then imports vLLM and builds the engine: `wait_ready`)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_fh = open(self.log_path, "ab")
        log.info("starting the vLLM worker (%s, %s) for %s; its log: %s", self.spec.versions.get("package"),
                 self.spec.python, self.ckpt, self.log_path)
        self._t0 = time.monotonic()
        self._launched = True
        # own session: a Ctrl-C reaches this process, which then shuts the worker down (close())
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log_fh, env=self.env(), start_new_session=True,
                                     preexec_fn=_set_parent_death_signal if sys.platform == "linux" else None)

    def wait_ready(self) -> None:
        msg = self._read(self.spec.options.start_timeout_s, starting=True)
        if "ready" not in msg:
            self._stop(kill=True)
            raise RunFailure(f"vLLM worker failed to start: {msg.get('error', msg)} (log: {self.log_path})")
        self.info = msg["ready"]
        log.info("vLLM worker ready in %.0f s (vllm %s, torch %s)", time.monotonic() - self._t0, self.info.get("vllm"),
                 self.info.get("torch"))

    def close(self) -> None:
        """Ask the worker to exit; terminate, then kill, one that does not."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self._write({"id": -1, "op": "shutdown"})
                self.proc.wait(timeout=60)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self._stop(kill=False)

    def _stop(self, kill: bool) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            self._code = proc.poll()
            # the worker's whole session (it was started as its leader): its engine processes, and what a
            # killed worker leaves behind (multiprocessing's resource tracker), even once the worker is gone
            try:
                os.killpg(proc.pid, 9 if kill else 15)
            except OSError:  # nothing left in the session
                pass
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for fh in (getattr(proc, "stdin", None), getattr(proc, "stdout", None), self._log_fh):
            try:
                if fh is not None:
                    fh.close()
            except OSError:
                pass
        self._log_fh = None

    def __enter__(self) -> VllmWorker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ protocol
    def _write(self, obj: dict) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(obj, separators=(",", ":")) + "\n").encode("utf-8"))
        self.proc.stdin.flush()

    def _read(self, timeout: float | None = None, starting: bool = False) -> dict:
        import select

        assert self.proc is not None and self.proc.stdout is not None
        if timeout is not None:
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            if not ready:
                self._stop(kill=True)
                raise RunFailure(f"vLLM worker: no answer within {timeout:.0f} s "
                                 f"({'start' if starting else 'request'}; log: {self.log_path})")
        line = self.proc.stdout.readline()
        if not line:
            raise self._died()
        return json.loads(line)

    def _died(self) -> RunFailure:
        code = self.proc.wait() if self.proc is not None else self._code
        last = _last_line(self.log_path)
        self._stop(kill=True)
        return RunFailure(f"vLLM worker exited (code {code}){f': {last}' if last else ''}; answers finished before "
                          f"are kept in the resume cache: run the same command again to resume (log: {self.log_path})")

    def request(self, op: str, **body) -> dict:
        return self.receive(self.send(op, **body), op)

    def send(self, op: str, **body) -> int:
        self.start()
        self._next += 1
        rid = self._next
        try:
            self._write({"id": rid, "op": op, **body})
        except (BrokenPipeError, OSError, ValueError):
            raise self._died() from None
        return rid

    def receive(self, rid: int, op: str) -> dict:
        msg = self._read()
        if msg.get("id") != rid:
            raise RunFailure(f"vLLM worker: answer {msg.get('id')} to request {rid} (log: {self.log_path})")
        if "error" in msg:
            raise RunFailure(f"vLLM worker: {op} failed: {msg['error']} (log: {self.log_path})")
        return msg

    def generate_ids(self, prompts: list[PromptIds], params: dict) -> list[list[dict]]:
        """Per prompt, its `params["n"]` (default 1) outputs {ids, finish_reason, stop_reason, logprobs, ...}."""
        if not prompts:
            return []
        return self.finish_generate(prompts, self.send_generate(prompts, params))

    def send_generate(self, prompts: list[PromptIds], params: dict) -> int:
        payload = [{"ids": [int(i) for i in p.ids], "image": image_payload(p.image)} for p in prompts]
        return self.send("generate", prompts=payload, params=params)

    def finish_generate(self, prompts: list[PromptIds], rid: int) -> list[list[dict]]:
        msg = self.receive(rid, "generate")
        self._check_expansion(prompts, msg.get("prompt_ids"))
        return msg["outputs"]

    def _check_expansion(self, prompts: list[PromptIds], ran_ids: list | None) -> None:
        """vLLM's expansion of each prompt (`ran_ids`, None where not returned) against the `expanded` ids the
        checkpoint's processor gives: a mismatch means the two would answer different inputs."""
        for p, ran in zip(prompts, ran_ids or []):
            if p.expanded is not None and ran is not None and list(p.expanded) != list(ran):
                raise RunFailure(f"vLLM worker: its processor expanded a prompt to {len(ran)} tokens where the "
                                 f"checkpoint's processor gives {len(p.expanded)}: the two would answer different "
                                 f"inputs (log: {self.log_path})")

    def next_logprobs(self, prompts: list[PromptIds], n: int, check: bool = False) -> list[list[list]]:
        """Per prompt, the top-n [token id, raw log-prob] of its one next position (vllm_worker.py's
        `next_logprobs`); each distinct image is sent once. check: compare vLLM's expansion of every prompt
        with `expanded` (as `finish_generate` does)."""
        if not prompts:
            return []
        return self.finish_next_logprobs(prompts, self.send_next_logprobs(prompts, n, check))

    def send_next_logprobs(self, prompts: list[PromptIds], n: int, check: bool = False) -> int:
        images: dict[int, int] = {}
        payload = []
        for p in prompts:
            k = None if p.image is None else images.setdefault(id(p.image), len(images))
            # only the prompts that carry their expansion come back expanded: a refill call holds a few
            # nodes' first requests among hundreds of beam rows (~700 ids each at 7B), checked once each
            payload.append({"ids": [int(i) for i in p.ids], "image": k, "check": p.expanded is not None})
        by_id = {id(p.image): p.image for p in prompts if p.image is not None}
        return self.send("next_logprobs", prompts=payload, images=[image_payload(by_id[i]) for i in images],
                         logprobs=int(n), prompt_ids=bool(check))

    def finish_next_logprobs(self, prompts: list[PromptIds], rid: int) -> list[list[list]]:
        msg = self.receive(rid, "next_logprobs")
        self._check_expansion(prompts, msg.get("prompt_ids"))
        return msg["top"]


class Worker(Protocol):
    """What drives a vLLM engine: one VllmWorker, or VllmReplicas of them."""

    info: dict              # the worker's "ready" answer (vocab, logprobs limits)
    max_logprobs: int | None
    log_path: Path

    @property
    def running(self) -> bool: ...

    def start(self) -> None: ...

    def generate_ids(self, prompts: list[PromptIds], params: dict) -> list[list[dict]]: ...

    def next_logprobs(self, prompts: list[PromptIds], n: int, check: bool = False) -> list[list[list]]: ...

    def close(self) -> None: ...


class VllmReplicas:
    """vLLM's data parallelism as `n` workers (vLLM's offline LLM class has none: "not supported for
    single-process usage"), each on its own `tp` GPUs; a batch is split in contiguous parts, one per worker,
    sent to all before any answer is read, and put back in order."""

    def __init__(self, spec: EngineSpec, ckpt: str | Path, dtype: str, device: str, log_path: Path,
                 seed: int = 0, max_model_len: int | None = None):
        n, tp = spec.options.data_parallel_size, spec.options.tensor_parallel_size
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        gpus = [g for g in visible.split(",") if g.strip()] if visible else [str(i) for i in range(n * tp)]
        if len(gpus) < n * tp:
            raise UserError(f"vllm.data_parallel_size={n} x vllm.tensor_parallel_size={tp}: needs {n * tp} GPUs, "
                            f"{len(gpus)} visible")
        base = Path(log_path)
        self.replicas = [VllmWorker(spec, ckpt, dtype, device, log_path=base.with_name(f"{base.stem}.{i}{base.suffix}"),
                                    seed=seed, gpus=gpus[i * tp:(i + 1) * tp], max_model_len=max_model_len)
                         for i in range(n)]
        self.log_path = base

    @property
    def running(self) -> bool:
        return all(r.running for r in self.replicas)

    @property
    def info(self) -> dict:  # the same checkpoint and options: replica 0's vocab and limits are every one's
        return self.replicas[0].info

    @property
    def max_logprobs(self) -> int | None:
        return self.replicas[0].max_logprobs

    @max_logprobs.setter
    def max_logprobs(self, n: int | None) -> None:
        for r in self.replicas:
            r.max_logprobs = n

    def _parts(self, count: int) -> list[tuple[int, int]]:
        size = -(-count // len(self.replicas))
        return [(i * size, min(count, (i + 1) * size)) for i in range(len(self.replicas)) if i * size < count]

    def start(self) -> None:
        todo = [r for r in self.replicas if not r.running]
        for r in todo:
            r.launch()
        for r in todo:
            r.wait_ready()

    def generate_ids(self, prompts: list[PromptIds], params: dict) -> list[list[dict]]:
        if not prompts:
            return []
        self.start()
        sent = []
        for (a, b), r in zip(self._parts(len(prompts)), self.replicas):
            p = dict(params)
            if params.get("seeds"):
                p["seeds"] = params["seeds"][a:b]
            sent.append((r, prompts[a:b], r.send_generate(prompts[a:b], p)))
        out: list[list[dict]] = []
        for r, chunk, rid in sent:
            out.extend(r.finish_generate(chunk, rid))
        return out

    def next_logprobs(self, prompts: list[PromptIds], n: int, check: bool = False) -> list[list[list]]:
        """VllmWorker.next_logprobs split as generate_ids splits (the group beam search's op, vllm_beam.py)."""
        if not prompts:
            return []
        self.start()
        sent = [(r, prompts[a:b], r.send_next_logprobs(prompts[a:b], n, check))
                for (a, b), r in zip(self._parts(len(prompts)), self.replicas)]
        return [top for r, chunk, rid in sent for top in r.finish_next_logprobs(chunk, rid)]

    def close(self) -> None:
        for r in self.replicas:
            r.close()


def make_worker(spec: EngineSpec, ckpt: str | Path, dtype: str = "float32", device: str = "cpu", *,
                log_path: str | Path, seed: int = 0) -> Worker:
    """One worker, or `vllm.data_parallel_size` of them (GPU only: on CPU one engine uses every core), after
    the checks that say why vLLM could not serve this checkpoint here (evalsuite/engines/vllm_check.py)."""
    from evalsuite.engines.vllm_check import check_before_start

    if spec.options.data_parallel_size > 1 and device == "cpu":
        raise UserError("vllm.data_parallel_size: GPU only (on CPU one vLLM engine already uses every core)")
    limit = check_before_start(ckpt, spec, device, dtype)
    if spec.options.data_parallel_size > 1:
        return VllmReplicas(spec, ckpt, dtype, device, Path(log_path), seed, max_model_len=limit)
    return VllmWorker(spec, ckpt, dtype, device, log_path=log_path, seed=seed, max_model_len=limit)


def _last_line(path: Path | None) -> str:
    """The last error line of the worker's log (what a dead worker printed), shortened; "" when its last
    lines are ordinary log lines (a killed worker prints nothing)."""
    if path is None or not path.is_file():
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - 8192))
            lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    tail = [ln for ln in lines[-20:] if "Error" in ln or "error:" in ln or ln.startswith("Killed")]
    return tail[-1][:300] if tail else ""
