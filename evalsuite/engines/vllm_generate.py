"""evalsuite's GenRequests as vLLM worker requests: prompt ids, the prepared image, and the sampling
parameters that make vLLM decode as HF `generate` does here (evalsuite/models/vlm.py)."""
from __future__ import annotations

from pathlib import Path

from evalsuite.engines.vllm_process import PromptIds, Worker
from evalsuite.errors import UserError

GENERATION_FIELDS_REFUSED = ("no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
                             "min_new_tokens", "forced_bos_token_id", "forced_eos_token_id", "begin_suppress_tokens",
                             "sequence_bias", "exponential_decay_length_penalty", "renormalize_logits")


def refuse_unsupported(num_beams: int, where: str = "gen.num_beams") -> None:
    """The one refusal of decoding settings vLLM's sampler cannot reproduce (run config and every request)."""
    if num_beams > 1:
        raise UserError(f"{where}={num_beams}: beam search is not supported with --engine vllm (use --engine hf)")


class VllmGenerator:
    """evalsuite's GenRequests answered by a vLLM worker, through the checkpoint's processor (ModelInputs).

    The same prompt text, image preparation and token suppression as evalsuite/models/vlm.py's `generate`;
    the checkpoint's generation_config.json is read as HF `generate` reads it (EOS ids, repetition penalty,
    sampling's top_k); a field there that changes HF's answers and that this engine cannot apply is refused."""

    def __init__(self, worker: Worker, model_inputs, ckpt: str | Path):
        self.worker, self.inputs, self.ckpt = worker, model_inputs, Path(ckpt)
        self.tokenizer = model_inputs.tokenizer
        self._gen_defaults: dict | None = None

    def generation_defaults(self) -> dict:
        """{eos_ids, suppress_ids, repetition_penalty, top_k} from the checkpoint's configs (no weights)."""
        if self._gen_defaults is None:
            from transformers import AutoConfig, GenerationConfig

            from evalsuite.models.vlm import suppressed_token_ids

            config = AutoConfig.from_pretrained(self.ckpt, local_files_only=True)
            try:
                gc = GenerationConfig.from_pretrained(self.ckpt, local_files_only=True)
            except OSError:  # no generation_config.json: transformers derives one from the model config
                gc = GenerationConfig.from_model_config(config)
            for name in GENERATION_FIELDS_REFUSED:
                value = getattr(gc, name, None)
                if value not in (None, 0, False, [], {}):
                    raise UserError(f"{self.ckpt}/generation_config.json: {name}={value!r} changes HF's answers and "
                                    "--engine vllm does not apply it; use --engine hf")
            eos = gc.eos_token_id if gc.eos_token_id is not None else self.tokenizer.eos_token_id
            eos = [e for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None]
            self._gen_defaults = {"eos_ids": [int(e) for e in eos],
                                  "suppress_ids": suppressed_token_ids(self.inputs.processor, config, gc),
                                  "repetition_penalty": float(gc.repetition_penalty or 1.0),
                                  "top_k": int(gc.top_k) if gc.top_k else -1}
        return dict(self._gen_defaults)

    def prompt_ids(self, question: str, image, with_image: bool) -> PromptIds:
        """The prompt as HF generation encodes it: the rendered text, one image placeholder unexpanded."""
        from evalsuite.models.vlm import load_image

        text = self.inputs.prompt(question, with_image)
        raw = load_image(image) if with_image else None
        enc = self.inputs.encode([text], [raw] if with_image else None)
        bos = getattr(self.tokenizer, "bos_token", None)
        ids = self.tokenizer(text, add_special_tokens=not (bos and text.startswith(bos)))["input_ids"]
        return PromptIds(list(ids), self.inputs.prepare_image(raw) if with_image else None,
                         enc["input_ids"][0].tolist())

    def params(self, gen, n: int = 1) -> dict:
        refuse_unsupported(gen.num_beams)
        d = self.generation_defaults()
        p = {"max_tokens": gen.max_new_tokens, "n": n, "stop_token_ids": d["eos_ids"],
             # as HF's `generate` here: nothing banned unless gen.suppress_special_tokens (docs/csr-fidelity.md)
             "suppress_ids": d["suppress_ids"] if gen.suppress_special_tokens else [],
             "repetition_penalty": d["repetition_penalty"]}
        if gen.do_sample:
            p.update(temperature=gen.temperature, top_p=gen.top_p, top_k=d["top_k"])
        else:
            p["temperature"] = 0.0
        return p

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True).strip()

    def generate(self, requests, gen) -> list[str]:
        """Answers to evalsuite GenRequests, in order (as evalsuite.models.vlm.generate returns them)."""
        from evalsuite.engines.seeds import stable_seed

        if not requests:
            return []
        prompts = [self.prompt_ids(r.prompt, r.image, r.image is not None) for r in requests]
        params = self.params(gen)
        if gen.do_sample:  # one seed per request: its answer does not depend on the batch it is in
            params["seeds"] = [stable_seed(gen.seed, str(r.key)) for r in requests]
        outputs = self.worker.generate_ids(prompts, params)
        return [self.decode(rows[0]["ids"]) for rows in outputs]
