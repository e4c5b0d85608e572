"""CSR trees of the group beam search on vLLM (`tree.expander: group_beam`, `tree.engine: vllm`) equal the HF
reference's (training/csr/vllm_beam.py, docs/engines.md "CSR trees on vLLM")."""
from __future__ import annotations

import logging

import pytest


@pytest.mark.parametrize("arch", ["llava", "qwen2_vl"])
def test_group_beam_trees_on_vllm_equal_hf(arch, vllm_spec, vllm_ckpts, world_dir, tmp_path, caplog):
    """Tiny LLaVA and Qwen2-VL (M-RoPE positions for the beams' tokens), 2 prompts, depth 2, 6 new tokens,
    under the released rules and under `stop: sentence_marks` with suppressed special tokens (a larger N):
    the trees grown from vLLM's top-N log-probs, one call per search step, are the HF reference path's
    (node ids, token ids, statuses, scores within 1e-5), but for near-ties."""
    import time

    from evalsuite.models.vlm import load_vlm
    from training.csr.config import TreeConfig
    from bench.tree_diff import first_difference
    from training.csr.generate import TreeGenerator
    from training.csr.vllm_beam import logprobs_needed
    from training.csr.vllm_expand import VllmSampler

    ckpt = vllm_ckpts[arch]
    vlm = load_vlm(ckpt, device="cpu")
    images = world_dir / "images" / "train"
    records = [{"id": p.stem, "image": p.name, "question": "Describe the image."} for p in sorted(images.iterdir())[:2]]
    rules = [{}, {"stop": "sentence_marks", "suppress_special_tokens": True}]
    log_path = tmp_path / "vllm_worker.log"
    with caplog.at_level(logging.INFO, logger="training.csr.vllm_expand"):
        with VllmSampler.open(vlm.inputs, ckpt, TreeConfig(engine="vllm"), log_path=log_path) as sampler:
            for rule in rules:
                kw = {"max_new_tokens": 6, "max_depth": 2, **rule}
                ref = TreeGenerator(vlm, TreeConfig(engine="reference", **kw), images).generate(records, progress=False)
                calls = sampler.beam_stats.calls
                gen = TreeGenerator(vlm, TreeConfig(engine="vllm", **kw), images, sampler=sampler)
                t0 = time.perf_counter()
                new = gen.generate(records, progress=False)
                print(f"{rule or 'released'}: N={logprobs_needed(gen.spec)}, {time.perf_counter() - t0:.1f} s, "
                      f"{sampler.beam_stats.calls - calls} calls, {sum(len(t.nodes) for t in new)} nodes")
                assert [t.id for t in new] == [t.id for t in ref]
                assert all(len(t.nodes) > 1 + 5 for t in new)  # the trees grew past the first level
                diffs = [d for a, b in zip(ref, new) if (d := first_difference(a, b))]
                for d in diffs:
                    print(f"trees differ: prompt {d.tree}, node {d.node}, {d.what}, score gap {d.gap:.3g}")
                assert all(d.near_tie() for d in diffs), diffs
            print(sampler.beam_stats.line(), f"; worker KV capacity {sampler.kv_tokens()} tokens")
            assert (sampler.kv_tokens() or 0) > 0  # the refill's bound (vllm_beam.grow_topn)
            assert sampler.beam_stats.calls > 0 and sampler.beam_stats.requests < sampler.beam_stats.beam_rows
    assert "tree.engine vllm, group_beam: " in caplog.text  # the counts are logged at close
