"""The vLLM worker against HF `generate` on tiny LLaVA and Qwen2-VL (with images): the same greedy ids, the
prompt vLLM ran equal to the checkpoint processor's, sampled rows that stop at the sentence end with
per-token log-probs (a worker killed mid-run: tests/engines/test_run_engine.py)."""
from __future__ import annotations

import pytest

from evalsuite.gen_settings import GenConfig
from evalsuite.types import GenRequest

QUESTION = "Please describe this image in detail."
N_NEW = 24


@pytest.fixture(scope="module", params=["llava", "qwen2_vl"])
def arch_engine(request, vllm_spec, vllm_ckpts, tmp_path_factory):
    """(arch, HF VLM, VllmGenerator) with one worker per checkpoint for the module."""
    from evalsuite.engines.vllm_generate import VllmGenerator
    from evalsuite.engines.vllm_process import VllmWorker
    from evalsuite.models.vlm import load_vlm

    ckpt = vllm_ckpts[request.param]
    vlm = load_vlm(ckpt)
    log_path = tmp_path_factory.mktemp("vllm-log") / "vllm_worker.log"
    engine = VllmWorker(vllm_spec, ckpt, dtype="float32", device="cpu", log_path=log_path)
    yield request.param, vlm, VllmGenerator(engine, vlm.inputs, ckpt)
    engine.close()
    assert engine.proc is None


def _requests(world, n=4):
    from evalsuite.tasks.coco import coco_images

    return [GenRequest(str(im["id"]), im["path"], QUESTION) for im in coco_images(world, "train")[:n]]


def test_greedy_ids_equal_hf(arch_engine, world_dir):
    """Token for token: vLLM's greedy answer ids are HF generate's, one request at a time and as a batch."""
    import torch

    from evalsuite.models.vlm import encode_batch, suppressed_token_ids

    arch, vlm, gen = arch_engine
    reqs = _requests(world_dir)
    hf_ids = []
    for r in reqs:  # one request per HF call: no padding in the reference
        enc = encode_batch(vlm, [r])
        with torch.inference_mode():
            out = vlm.model.generate(**enc, max_new_tokens=N_NEW, do_sample=False, suppress_tokens=suppressed_token_ids(vlm.processor, vlm.model.config, vlm.model.generation_config),
                                     pad_token_id=vlm.tokenizer.pad_token_id)
        hf_ids.append(out[0, enc["input_ids"].shape[1]:].tolist())
    prompts = [gen.prompt_ids(r.prompt, r.image, True) for r in reqs]
    n_image = {"llava": 4, "qwen2_vl": 16}[arch]  # the kit's image tokens per image: the placeholder expanded
    assert all(len(p.expanded) == len(p.ids) - 1 + n_image for p in prompts)
    outputs = gen.worker.generate_ids(prompts, gen.params(GenConfig(max_new_tokens=N_NEW)))  # checks the expansion
    vllm_ids = [rows[0]["ids"] for rows in outputs]
    assert vllm_ids == hf_ids, arch
    assert all(len(ids) == N_NEW for ids in hf_ids)  # the comparison covered every step (no early EOS)
    # the evalsuite-level answers (decoded by the project's tokenizer) are HF's text
    from evalsuite.models.vlm import generate

    assert gen.generate(reqs, GenConfig(max_new_tokens=N_NEW)) == generate(vlm, reqs, GenConfig(max_new_tokens=N_NEW),
                                                                           batch_size=4, progress=False)


def test_sampling_stops_at_sentence_end_with_logprobs(arch_engine, world_dir):
    """n samples per prompt; a sample ends at its first stop id (or the length cap) and carries one log-prob
    per token, which sum to vLLM's cumulative log-prob; the same seed gives the same samples."""
    import math

    from training.csr.generate import sentence_end_ids

    _, vlm, gen = arch_engine
    stop = sentence_end_ids(vlm.tokenizer, ["."])
    prompts = [gen.prompt_ids(r.prompt, r.image, True) for r in _requests(world_dir, 2)]
    params = {**gen.params(GenConfig(max_new_tokens=N_NEW)), "temperature": 1.0, "n": 5, "logprobs": True,
              "stop_token_ids": stop, "seeds": [11, 12]}
    first = gen.worker.generate_ids(prompts, params)
    again = gen.worker.generate_ids(prompts, params)
    assert [[r["ids"] for r in rows] for rows in first] == [[r["ids"] for r in rows] for rows in again]
    for rows in first:
        assert len(rows) == 5
        for r in rows:
            assert r["ids"] and len(r["logprobs"]) == len(r["ids"])
            assert all(lp <= 0 for lp in r["logprobs"])
            assert math.isclose(sum(r["logprobs"]), r["cumulative_logprob"], rel_tol=1e-4, abs_tol=1e-4)
            ended = r["ids"][-1] in stop
            assert ended == (r["finish_reason"] == "stop")
            assert not any(t in stop for t in r["ids"][:-1])
            assert ended or len(r["ids"]) == N_NEW

