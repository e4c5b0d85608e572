"""The vLLM engine behind the backend interface lmms-eval's adapter calls (evalsuite/lmms/backend.py;
the HF one is evalsuite/models/backend.py's VLMBackend)."""
from __future__ import annotations

from evalsuite.engines.vllm_generate import VllmGenerator
from evalsuite.errors import UserError


class VllmBackend:
    """generate / prompt_text / loglikelihood, `fingerprint` (the response-cache key), `engine_identity`
    (joins every lmms result's identity: evalsuite/lmms/task.py), `name`, `device`, `dtype`."""

    def __init__(self, generator: VllmGenerator, fingerprint, identity: dict, dtype: str, device: str,
                 name: str | None = None):
        from evalsuite.models.backend import cache_fingerprint

        self.generator = generator
        self.inputs_identity = generator.inputs.config.identity()
        self.name = name or str(generator.ckpt)
        self.device, self.dtype = device, dtype
        self.engine_identity = identity
        self.fingerprint = cache_fingerprint(fingerprint, generator.inputs.config, device, dtype, identity)

    def generate(self, requests, gen) -> list[str]:
        return self.generator.generate(requests, gen)

    def prompt_text(self, context: str, with_image: bool = True) -> str:
        return self.generator.inputs.prompt(context, with_image)

    def loglikelihood(self, pairs):
        raise UserError("--engine vllm: log-likelihood (multiple-choice) lmms-eval tasks are not supported yet; "
                        "run them with --engine hf")
