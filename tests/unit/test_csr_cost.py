"""bench/csr_cost.py: the 7B shapes, the schedule rescale, the roofline rule by hand, and the calibration
on the recorded H200 figures (fitted figures exact, the held-out one within +-30%)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import csr_cost  # noqa: E402
from csr_cost import Forward, Params, Schedule, Shape  # noqa: E402


def test_full_shapes_are_the_released_models():
    llava, qwen = csr_cost.full_shape("llava"), csr_cost.full_shape("qwen2_vl")
    # K and V, 32 layers x 32 heads x 128 (MHA) / 28 layers x 4 KV heads x 128 (GQA), bf16
    assert llava.kv_per_token == 2 * 32 * 32 * 128 * 2 == 524_288
    assert qwen.kv_per_token == 2 * 28 * 4 * 128 * 2 == 57_344
    # with the input embedding table, the released parameter counts (tests/unit/test_gpu_figures.py pins them)
    assert llava.n_body + llava.n_head + llava.n_vision + 32064 * 4096 == 7_063_427_072
    assert qwen.n_body + qwen.n_head + qwen.n_vision + 152064 * 3584 == 8_291_375_616
    assert llava.patches == 24 * 24 + 1 and qwen.patches == 32 * 32


def test_a_schedule_is_rescaled_to_the_full_image():
    # two rows prefilling a prompt of 4 image + 6 text tokens each, then two rows decoding on top of it
    s = Schedule("s", [Forward(rows=2, cached=0, new=20, new_image=8, cached_image_rows=0, images=2, held=20),
                       Forward(rows=2, cached=20, new=2, new_image=0, cached_image_rows=2, images=0, held=22)])
    f0, f1 = s.full(img_tiny=4, img_full=576).forwards
    assert (f0.new, f0.new_image, f0.cached, f0.held) == (20 + 2 * 572, 2 * 576, 0, 20 + 2 * 572)
    assert (f1.new, f1.cached, f1.held) == (2, 20 + 2 * 572, 22 + 2 * 572)


SHAPE = Shape(arch="x", layers=2, hidden=8, kv_per_token=100, n_body=1000, n_head=10, n_vision=50, patches=3, vocab=7)
GPU = {"bw": 1e3, "peak": 1e9, "mem": 0}


def test_one_forward_by_hand():
    f = Forward(rows=2, cached=10, new=2, new_image=0, cached_image_rows=2, images=0, held=12)
    p = Params(a=0.5, r=0.25, e=0.125)
    # bytes: weights 2 x 1010 + KV read/written (10 + 2) x 100 + the cache copy 2 x 10 x 100 = 5220; flops tiny
    pool = Schedule("pool", [f], model_ops_per_forward=4, engine_ops_per_forward=6)
    per_op = 0.5 * csr_cost.TINY_LAYERS / 4
    assert csr_cost.forward_seconds(f, SHAPE, GPU, p, pool) == pytest.approx(5220 / 1e3 + 2 * 0.5 + 6 * per_op)
    # the reference: its log-probs to the host and its CPU search per row and per vocabulary element
    ref = Schedule("ref", [f], host_search=True)
    host = 2 * 7 * 4 / csr_cost.HOST_BW + 0.25 * 2 + 0.125 * 2 * 7
    assert csr_cost.forward_seconds(f, SHAPE, GPU, p, ref) == pytest.approx(5220 / 1e3 + 2 * 0.5 + host)
    # vLLM: paged KV (no copy), its own per-layer and per-request costs
    vllm = Schedule("vllm", [f], topn=True)
    assert csr_cost.forward_seconds(f, SHAPE, GPU, p, vllm) == pytest.approx(
        3220 / 1e3 + 2 * csr_cost.VLLM_A_PER_LAYER + 2 * csr_cost.VLLM_PER_REQUEST)


@pytest.mark.slow
def test_calibration_reproduces_the_recorded_h200_figures(tmp_path):
    shapes = {a: csr_cost.full_shape(a) for a in ("llava", "qwen2_vl")}
    params, errors, cal = csr_cost.calibrate(tmp_path, shapes, quiet=True)
    # the recorded schedule is the GPU run's: 140 sentences of 70 tokens in 210 forwards
    for arch in ("llava", "qwen2_vl"):
        s = cal[arch]["csr"]
        assert (s.sentences, s.tokens, len(s.forwards)) == (140, 9800, 210)
    assert params.a > 0 and params.r > 0 and params.e > 0
    for fitted in ("llava eval", "llava csr reference", "qwen2_vl csr reference"):
        assert abs(errors[fitted]) < 1e-6, (fitted, errors[fitted])
    assert abs(errors["qwen2_vl eval"]) <= 0.30, errors   # held out


def test_a_packed_step_is_recorded_per_node_row():
    """The pool's shared rows (tree.share_prefix): a forward feeding each node's row one token per beam
    records the row once, its new tokens (one per beam) and the cached columns any of its beams attends,
    from sdpa's boolean 4D mask or eager's additive one alike."""
    import torch

    see = torch.zeros(2, 2, 6, dtype=torch.bool)  # 2 nodes x 2 beams over 6 cached columns
    see[0, :, 2:5] = True                         # node 0: a 3-token context (2 columns of left padding)
    see[1, :, 0:4] = True                         # node 1: a 4-token context,
    see[1, 1, 5] = True                           # and beam 1's own earlier token (beam 0's went with its lineage)
    mask = torch.cat([see, torch.eye(2, dtype=torch.bool).expand(2, 2, 2)], 2)[:, None]
    additive = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    for m in (mask, additive):
        rec = csr_cost.Recorder(torch.nn.Identity(), image_token_id=99)
        rec._fwd(None, (), {"input_ids": torch.ones(2, 2, dtype=torch.long), "attention_mask": m})
        (f,) = rec.close()
        assert (f.rows, f.new, f.cached, f.held) == (2, 4, 3 + 5, 12)
