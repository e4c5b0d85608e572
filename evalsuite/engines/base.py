"""The eval-engine protocol: what generates a run's answers, chosen once per run (`make_engine`) and held by
its RunContext (evalsuite/tasks/base.py). `HFEngine`: transformers' `generate` in this process;
`VllmEvalEngine`: a vLLM worker in its own environment (vllm_process.py, vllm_generate.py, vllm_lmms.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from evalsuite.errors import UserError


class Engine(Protocol):
    name: str

    def identity(self) -> dict:
        """What joins every result's identity and resume-cache key ({} for HF: keys written before
        engines existed stay valid)."""

    def generate(self, requests, gen) -> list[str]: ...

    def loglikelihood(self, pairs) -> list[tuple[float, bool]]:
        """(log p(continuation | request), is greedy) per pair; a UserError where the engine has none."""

    def backend(self, fingerprint, name: str):
        """The engine behind lmms-eval's adapter (evalsuite/lmms/backend.py)."""

    def writing_to(self, output_dir: Path) -> Engine:
        """The engine with the run's output folder known (where its own files go, e.g. the worker log)."""

    def close(self) -> None: ...


class HFEngine:
    """transformers' `generate` on the checkpoint, loaded on first use by the run's ModelLoader."""

    name = "hf"

    def __init__(self, loader, batch_size: int = 8):
        self.loader, self.batch_size = loader, batch_size

    def identity(self) -> dict:
        return {}

    def generate(self, requests, gen) -> list[str]:
        from evalsuite.models.vlm import generate

        return generate(self.loader.get(), requests, gen, batch_size=self.batch_size, progress=False)

    def loglikelihood(self, pairs):
        from evalsuite.models.loglik import loglikelihood

        return loglikelihood(self.loader.get(), pairs)

    def backend(self, fingerprint, name: str):
        from evalsuite.models.backend import VLMBackend

        return VLMBackend(self.loader.get(), fingerprint, name=name)

    def writing_to(self, output_dir: Path) -> HFEngine:
        return self

    def close(self) -> None:
        pass


class VllmEvalEngine:
    """A vLLM worker for the run's checkpoint: checked now (vllm_check.py), started at the first answer
    not in the resume cache, stopped by `close()` (run_eval's finally)."""

    name = "vllm"

    def __init__(self, spec, loader, device_type: str, dtype: str, log_path: Path | None = None):
        from evalsuite.engines.vllm_check import check_before_start

        self.spec, self.loader, self.device_type, self.dtype = spec, loader, device_type, dtype
        self.log_path = log_path
        check_before_start(loader.ckpt, spec, device_type, dtype)
        self._generator: Any = None

    def identity(self) -> dict:
        return self.spec.identity()

    def generator(self):
        if self._generator is None:
            from evalsuite.engines.vllm_generate import VllmGenerator
            from evalsuite.engines.vllm_process import make_worker

            if self.log_path is None:
                raise RuntimeError("VllmEvalEngine: writing_to(output_dir) before the first request")
            worker = make_worker(self.spec, self.loader.ckpt, dtype=self.dtype, device=self.device_type,
                                 log_path=self.log_path)
            self._generator = VllmGenerator(worker, self.loader.prompts(), self.loader.ckpt)
        return self._generator

    def generate(self, requests, gen) -> list[str]:
        return self.generator().generate(requests, gen)

    def loglikelihood(self, pairs):
        raise UserError("--engine vllm: log-likelihood (multiple-choice) lmms-eval tasks are not supported yet; "
                        "run them with --engine hf")

    def backend(self, fingerprint, name: str):
        from evalsuite.engines.vllm_lmms import VllmBackend

        return VllmBackend(self.generator(), fingerprint, self.identity(), self.dtype, self.device_type, name=name)

    def writing_to(self, output_dir: Path) -> VllmEvalEngine:
        self.log_path = Path(output_dir) / "vllm_worker.log"  # docs/engines.md
        return self

    def close(self) -> None:
        if self._generator is not None:
            self._generator.worker.close()


def make_engine(spec, loader, device_type: str, dtype: str, batch_size: int = 8, world_size: int = 1) -> Engine:
    """The run's engine: HF for spec None (`--engine hf`), else vLLM (its checkpoint checked now)."""
    if spec is None:
        return HFEngine(loader, batch_size)
    if world_size > 1:
        raise UserError("--engine vllm: one process runs the engine; use vllm.data_parallel_size / "
                        "vllm.tensor_parallel_size instead of a multi-process launch (docs/multi-gpu.md)")
    return VllmEvalEngine(spec, loader, device_type, dtype)
