"""A loaded VLM behind the small interface evaluation harnesses call (lmms-eval's model adapter today).

    backend = VLMBackend.from_checkpoint("ckpt/", device="cpu")
    backend.generate([GenRequest(...)], GenConfig(max_new_tokens=16))   # -> [str]
    backend.loglikelihood([(GenRequest(...), " yes")])                   # -> [(logp, is_greedy)]

`fingerprint` (the key of the run's ModelId, evalsuite/identity.py: weights, prompt files, prompt settings,
device type and dtype) keys every cached answer. Any object with `generate`,
`loglikelihood`, `fingerprint`, `name` and `device` can stand in (tests use stub answerers).
"""
from __future__ import annotations

from evalsuite.types import GenConfig, GenRequest


class VLMBackend:
    """Answers GenRequests with a loaded evalsuite VLM."""

    def __init__(self, vlm, fingerprint, name: str | None = None):
        """fingerprint: the run's ModelId (evalsuite/identity.py: weights, prompt files, prompt settings,
        device type, dtype), whose key keys every cached answer; or a plain string (stub answerers),
        to which the prompt settings, device type and dtype are added here."""
        from evalsuite.identity import ModelId

        self.vlm = vlm
        # answers generated under other prompt settings (system prompt, template, image_aspect) must not be
        # served from the cache: their identity joins the fingerprint (nothing for the defaults)
        self.inputs_identity = vlm.inputs.config.identity() if getattr(vlm, "inputs", None) else {}
        self.name = name or str(vlm.path)
        self.device = str(vlm.device)
        model = getattr(vlm, "model", None)   # the dtype answers are computed in: part of results' identity
        self.dtype = str(model.dtype).removeprefix("torch.") if getattr(model, "dtype", None) is not None else None
        if isinstance(fingerprint, ModelId):
            self.fingerprint = fingerprint.key()
            return
        # answers computed on another device type or in another dtype differ: other cache entries
        self.fingerprint = (fingerprint + (vlm.inputs.config.cache_suffix() if self.inputs_identity else "")
                            + f"+{self.device.split(':')[0]}-{self.dtype}")

    @classmethod
    def from_checkpoint(cls, path, device=None, dtype=None, trust_remote_code: bool = False,
                        fingerprint: str | None = None) -> "VLMBackend":
        from evalsuite.models.vlm import load_vlm

        vlm = load_vlm(path, trust_remote_code=trust_remote_code, device=device, dtype=dtype)
        if fingerprint is None:  # the ModelId `evalsuite run` keys on (evalsuite/identity.py)
            from evalsuite.identity import ModelId

            inputs = vlm.inputs.config if getattr(vlm, "inputs", None) else None
            loaded = str(vlm.model.dtype).removeprefix("torch.")
            return cls(vlm, ModelId.of(path, inputs, str(vlm.device).split(":")[0], loaded), name=str(path))
        return cls(vlm, fingerprint, name=str(path))

    def generate(self, requests: list[GenRequest], gen: GenConfig) -> list[str]:
        from evalsuite.models.vlm import generate

        return generate(self.vlm, requests, gen, batch_size=max(1, len(requests)), progress=False)

    def prompt_text(self, context: str, with_image: bool = True) -> str:
        """The text the processor receives for `context` (chat template, system prompt, family format)."""
        from evalsuite.models.vlm import build_prompt

        return build_prompt(self.vlm, context, with_image)

    def loglikelihood(self, pairs: list[tuple[GenRequest, str]]) -> list[tuple[float, bool]]:
        from evalsuite.models.loglik import loglikelihood

        return loglikelihood(self.vlm, pairs)
