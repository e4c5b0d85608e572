"""A loaded VLM behind the small interface evaluation harnesses call (lmms-eval's model adapter today).

    backend = VLMBackend.from_checkpoint("ckpt/", device="cpu")
    backend.generate([GenRequest(...)], GenConfig(max_new_tokens=16))   # -> [str]
    backend.loglikelihood([(GenRequest(...), " yes")])                   # -> [(logp, is_greedy)]

`fingerprint` (the key of the run's ModelId, evalsuite/identity.py: weights, prompt files, prompt settings,
device type and dtype) keys every cached answer. Any object with `generate`,
`loglikelihood`, `fingerprint`, `name` and `device` can stand in (tests use stub answerers).
"""
from __future__ import annotations

from evalsuite.gen_settings import GenConfig
from evalsuite.types import GenRequest


class VLMBackend:
    """Answers GenRequests with a loaded evalsuite VLM."""

    def __init__(self, vlm, fingerprint, name: str | None = None):
        """fingerprint: the run's ModelId (evalsuite/identity.py: weights, prompt files, prompt settings,
        device type, dtype), whose key keys every cached answer; or a plain string (stub answerers),
        to which the prompt settings, device type and dtype are added here."""
        self.vlm = vlm
        # answers generated under other prompt settings (system prompt, template, image_aspect) must not be
        # served from the cache: their identity joins the fingerprint (nothing for the defaults)
        inputs = vlm.inputs.config if getattr(vlm, "inputs", None) else None
        self.inputs_identity = inputs.identity() if inputs is not None else {}
        self.name = name or str(vlm.path)
        self.device = str(vlm.device)
        model = getattr(vlm, "model", None)   # the dtype answers are computed in: part of results' identity
        self.dtype = str(model.dtype).removeprefix("torch.") if getattr(model, "dtype", None) is not None else None
        self.fingerprint = cache_fingerprint(fingerprint, inputs, self.device, self.dtype)

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


def cache_fingerprint(fingerprint, inputs=None, device: str = "cpu", dtype: str | None = None,
                      engine: dict | None = None) -> str:
    """The key every cached answer of a backend is filed under: a ModelId's key (evalsuite/identity.py: it
    holds the prompt settings, device type, dtype and engine already), or, for a plain string (stub
    answerers, lmms-eval's own CLI), the string with what changes answers added: prompt settings other than
    the defaults, device type and dtype, and an engine other than HF (with its versions)."""
    from evalsuite.identity import ModelId, digest

    if isinstance(fingerprint, ModelId):
        return fingerprint.key()
    suffix = inputs.cache_suffix() if inputs is not None and inputs.identity() else ""
    key = f"{fingerprint}{suffix}+{str(device).split(':')[0]}-{dtype}"
    return key + (f"+{engine['engine']['name']}-{digest(engine)}" if engine else "")
