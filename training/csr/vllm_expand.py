"""The CSR `sample` expander on vLLM (`tree.engine: vllm`; docs/engines.md "CSR trees").

    with VllmSampler.open(vlm, ckpt, cfg.tree) as sampler:     # one worker per tree-generation stage
        TreeGenerator(vlm, cfg.tree, image_root, sampler=sampler).generate(records)

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
"""
from __future__ import annotations

from pathlib import Path


class VllmSampler:
    """A vLLM worker for one checkpoint + the encoding of CSR prompts for it."""

    def __init__(self, generator, tree_cfg):
        self.generator, self.cfg = generator, tree_cfg

    @classmethod
    def open(cls, vlm, ckpt: str | Path, tree_cfg, dtype: str = "float32", device: str = "cpu",
             log_path: str | Path | None = None) -> VllmSampler:
        from evalsuite.engines.vllm_engine import VllmGenerator, make_engine, resolve_engine

        spec = resolve_engine("vllm")
        engine = make_engine(spec, ckpt, dtype=dtype, device=device, log_path=log_path, seed=tree_cfg.seed)
        return cls(VllmGenerator(engine, vlm.inputs, ckpt), tree_cfg)

    def __enter__(self) -> VllmSampler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.generator.engine.close()

    def prompt(self, image, question: str):
        """(ids with one image placeholder, the prepared image) of a CSR prompt."""
        p = self.generator.prompt_ids(question, image, True)
        return p.ids, p.image

    def expand(self, contexts, spec, keys: list[str]):
        """contexts: per node (unexpanded prompt ids, image, tree prompt ids (expanded), response ids).
        -> per node, `num_samples` Hyps best first (training.csr.search.Hyp)."""
        from evalsuite.engines.vllm_engine import PromptIds
        from training.csr.search import Hyp, row_seed

        cfg = self.cfg
        prompts = [PromptIds(list(ids) + list(resp), image, list(expanded) + list(resp))
                   for ids, image, expanded, resp in contexts]
        params = {"max_tokens": spec.max_new_tokens, "n": cfg.num_samples, "temperature": cfg.temperature,
                  "top_p": cfg.top_p, "stop_token_ids": list(spec.stop_ids), "suppress_ids": list(spec.suppress_ids),
                  "logprobs": True, "ignore_eos": True, "seeds": [row_seed(cfg.seed, k) for k in keys]}
        out = []
        for rows in self.generator.engine.generate_ids(prompts, params):
            hyps = [Hyp(tuple(r["ids"]), sum(r["logprobs"]) / len(r["logprobs"]), j) for j, r in enumerate(rows)]
            out.append(sorted(hyps, key=lambda h: -h.score))
        return out


def open_sampler(cfg, vlm, ckpt: str | Path, world: int, log_path: Path) -> VllmSampler:
    """The CSR loop's sampler for one iteration's checkpoint (its weights change every iteration)."""
    from evalsuite.errors import UserError
    from evalsuite.models.vlm import resolve_dtype

    if world > 1:
        raise UserError("tree.engine: vllm runs in one process; start the CSR loop without torchrun / accelerate")
    device = str(vlm.device).split(":")[0]
    return VllmSampler.open(vlm, ckpt, cfg.tree, dtype=resolve_dtype(device, cfg.dtype), device=device,
                            log_path=log_path)
