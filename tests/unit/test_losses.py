"""Losses of the DPO family against values worked out by hand.

sigma(1) = 0.7310586, sigma(2) = 0.8807971, sigma(3) = 0.9525741; -log sigma(1) = log(1 + e^-1) = 0.3132617,
-log sigma(-1) = 1.3132617, ln 2 = 0.6931472.
"""
import math

import pytest
import torch

from training.losses import LOSSES, diff_token_masks, sequence_logps


def t(*v):
    return torch.tensor(v, dtype=torch.float64)


def test_map_has_the_five_seed_losses():
    """VL-RLHF's log-probs by default: every loss on summed log-probs (ipo too), ddpo on its replaced
    spans; `ipo_logps: mean` is TRL's IPO, `ddpo_mask: changed` ours."""
    from training.losses import loss_spec

    assert set(LOSSES) == {"sigmoid", "hinge", "ipo", "kto_pair", "ddpo"}
    assert not any(s.average_logps for s in LOSSES.values())
    assert LOSSES["ddpo"].diff_mask == "replaced" and LOSSES["sigmoid"].diff_mask is None
    assert loss_spec("ipo").average_logps is False and loss_spec("ipo", ipo_logps="mean").average_logps
    assert loss_spec("ddpo", ddpo_mask="changed").diff_mask == "changed"
    assert loss_spec("sigmoid", ipo_logps="mean", ddpo_mask="changed") == LOSSES["sigmoid"]


def test_sigmoid():
    """c - r = 1, beta = 1: -log sigma(1) = 0.3132617; c = r: ln 2.
    Label smoothing 0.1: 0.9 * 0.3132617 + 0.1 * 1.3132617 = 0.4132617."""
    fn = LOSSES["sigmoid"].fn
    assert fn(t(1.0, 0.5), t(0.0, 0.5), beta=1.0).tolist() == pytest.approx([0.3132617, math.log(2)], abs=1e-6)
    assert fn(t(1.0), t(0.0), beta=1.0, label_smoothing=0.1).item() == pytest.approx(0.4132617, abs=1e-6)
    # beta scales the margin: beta 0.1, c - r = 10 is the same point as beta 1, c - r = 1.
    assert fn(t(10.0), t(0.0), beta=0.1).item() == pytest.approx(0.3132617, abs=1e-6)


def test_hinge():
    """beta 0.5: c - r = 1 -> max(0, 1 - 0.5) = 0.5; c - r = 4 -> max(0, 1 - 2) = 0; c = r -> 1."""
    fn = LOSSES["hinge"].fn
    assert fn(t(1.0, 4.0, 2.0), t(0.0, 0.0, 2.0), beta=0.5).tolist() == pytest.approx([0.5, 0.0, 1.0])


def test_ipo():
    """beta 0.5 -> target margin 1/(2 beta) = 1: c - r = 3 -> (3 - 1)^2 = 4; c - r = 1 -> 0; c = r -> 1.
    beta 0.1 at c = r: (0 - 5)^2 = 25."""
    fn = LOSSES["ipo"].fn
    assert fn(t(3.0, 1.0, 0.0), t(0.0, 0.0, 0.0), beta=0.5).tolist() == pytest.approx([4.0, 0.0, 1.0])
    assert fn(t(0.0), t(0.0), beta=0.1).item() == pytest.approx(25.0)


def test_kto_pair():
    """c = [1, 3], r = [-1, 0], beta 1. KL_c = max(mean c, 0) = 2, KL_r = max(-0.5, 0) = 0.
    chosen terms:   1 - sigma(1 - 0) = 0.2689414,  1 - sigma(3 - 0) = 0.0474259
    rejected terms: 1 - sigma(2 + 1) = 0.0474259,  1 - sigma(2 - 0) = 0.1192029
    per pair (mean of its two terms): 0.1581837, 0.0833144. At c = r = 0: 1 - sigma(0) = 0.5."""
    fn = LOSSES["kto_pair"].fn
    assert fn(t(1.0, 3.0), t(-1.0, 0.0), beta=1.0).tolist() == pytest.approx([0.1581837, 0.0833144], abs=1e-6)
    assert fn(t(0.0, 0.0), t(0.0, 0.0), beta=0.1).tolist() == pytest.approx([0.5, 0.5])


def test_ddpo_is_sigmoid_on_masked_logps():
    """Same formula as sigmoid (the difference is in which tokens enter the log-probs)."""
    assert LOSSES["ddpo"].fn(t(1.0), t(0.0), beta=1.0).item() == pytest.approx(0.3132617, abs=1e-6)


def test_step0_all_losses_at_zero_logratios():
    """Adapter B = 0 means policy == reference, so c = r = 0: sigmoid/ddpo ln 2, hinge 1, ipo 25 (beta .1), kto .5."""
    z = t(0.0, 0.0)
    want = {"sigmoid": math.log(2), "ddpo": math.log(2), "hinge": 1.0, "ipo": 25.0, "kto_pair": 0.5}
    for name, value in want.items():
        assert LOSSES[name].fn(z, z, beta=0.1).mean().item() == pytest.approx(value), name


def test_sequence_logps_sum_and_mean():
    """[-1, -2, -3] with mask [1, 0, 1]: sum -4, mean over 2 tokens -2; an empty mask gives 0 (clamped count)."""
    lp = t(-1.0, -2.0, -3.0).unsqueeze(0)
    m = t(1.0, 0.0, 1.0).unsqueeze(0)
    assert sequence_logps(lp, m).item() == -4.0
    assert sequence_logps(lp, m, average=True).item() == -2.0
    assert sequence_logps(lp, torch.zeros_like(m), average=True).item() == 0.0


def test_diff_token_masks():
    """[1,2,3,4,5,6] vs [1,2,3,9,5,6]: the block [1,2,3] (3 tokens) is shared; [5,6] is only 2 long, so it
    counts as different: both masks [0,0,0,1,1,1]. [7,1,2,3,8] vs [1,2,3]: [1,0,0,0,1] and [0,0,0]."""
    assert diff_token_masks([1, 2, 3, 4, 5, 6], [1, 2, 3, 9, 5, 6]) == ([0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1])
    assert diff_token_masks([7, 1, 2, 3, 8], [1, 2, 3]) == ([1, 0, 0, 0, 1], [0, 0, 0])
    assert diff_token_masks([1, 2], [3, 4]) == ([1, 1], [1, 1])
    assert diff_token_masks([5, 5, 5], [5, 5, 5]) == ([0, 0, 0], [0, 0, 0])


def test_rpo_nll_is_token_mean_nll_of_chosen():
    """Summed log-probs -6 over 3 tokens and -2 over 1 token: per-token NLL 2 and 2 -> 2.0.
    Already-averaged log-probs (ipo) -1 and -3 -> mean NLL 2.0."""
    import torch

    from training.losses import rpo_nll

    assert rpo_nll(torch.tensor([-6.0, -2.0]), torch.tensor([3, 1]), average_logps=False).item() == pytest.approx(2.0)
    assert rpo_nll(torch.tensor([-1.0, -3.0]), torch.tensor([5, 5]), average_logps=True).item() == pytest.approx(2.0)


def test_ipo_sum_vs_mean_by_hand():
    """Per-token log-ratios: chosen [0.5, 0.5, 0.5, 0.5] (4 tokens), rejected [-1, -1] (2 tokens), beta 0.1.
    Summed (VL-RLHF): c = 2, r = -2 -> (4 - 5)^2 = 1. Token means (TRL): c = 0.5, r = -1 -> (1.5 - 5)^2 = 12.25."""
    from training.losses import loss_spec

    chosen = t(0.5, 0.5, 0.5, 0.5).unsqueeze(0)
    rejected = t(-1.0, -1.0, 0.0, 0.0).unsqueeze(0)
    m_c, m_r = t(1, 1, 1, 1).unsqueeze(0), t(1, 1, 0, 0).unsqueeze(0)
    for mode, want in (("sum", 1.0), ("mean", 12.25)):
        spec = loss_spec("ipo", ipo_logps=mode)
        c = sequence_logps(chosen, m_c, average=spec.average_logps)
        r = sequence_logps(rejected, m_r, average=spec.average_logps)
        assert spec.fn(c, r, beta=0.1).item() == pytest.approx(want), mode


def test_replaced_spans_insertion_only_is_empty():
    """VL-RLHF's diff_lib: only gaps with both sides non-empty count.
    [1,2,3,4,5,6] vs [1,2,3,9,9,4,5,6]: blocks [1,2,3] and [4,5,6], the only gap is b's [9,9] with an
    empty a side -> nothing. [1,2,3,7,4,5,6] vs [1,2,3,8,8,4,5,6]: gap a{3} / b{3,4} -> replaced."""
    from training.losses import replaced_spans

    assert replaced_spans([1, 2, 3, 4, 5, 6], [1, 2, 3, 9, 9, 4, 5, 6]) == (set(), set())
    assert replaced_spans([1, 2, 3, 7, 4, 5, 6], [1, 2, 3, 8, 8, 4, 5, 6]) == ({3}, {3, 4})
    assert replaced_spans([7, 1, 2, 3], [1, 2, 3]) == (set(), set())  # a deletion at the start


def test_replaced_token_masks_on_label_rows():
    """Prompt length 2, rows padded with 0 to the batch's widest row and shifted by one (labels[:, 1:]).
    Insertion only: chosen [5,6,7,8,9,10], rejected [5,6,7,20,21,8,9,10]; width 10; a = [0,5,6,7,8,9,10,0,0],
    b = [0,5,6,7,20,21,8,9,10]: blocks [0,5,6,7], [8,9,10]; gaps a{} / b{4,5} and a{7,8} / b{} -> both masks 0.
    A tail appended to rejected: chosen [5,6,7,8], rejected [5,6,7,8,9,10]; a = [0,5,6,7,8,0,0],
    b = [0,5,6,7,8,9,10]: the last gap pairs a's padding with b's [9,10] -> rejected tokens 9, 10 count.
    The same two pairs in one batch (width 10) give the same masks for each."""
    from training.losses import replaced_token_masks

    ins = (2, [5, 6, 7, 8, 9, 10], [5, 6, 7, 20, 21, 8, 9, 10])
    tail = (2, [5, 6, 7, 8], [5, 6, 7, 8, 9, 10])
    assert replaced_token_masks([ins]) == [([0] * 6, [0] * 8)]
    assert replaced_token_masks([tail]) == [([0, 0, 0, 0], [0, 0, 0, 0, 1, 1])]
    assert replaced_token_masks([ins, tail]) == [([0] * 6, [0] * 8), ([0, 0, 0, 0], [0, 0, 0, 0, 1, 1])]
    # ours (`ddpo_mask: changed`) marks the inserted tokens
    assert diff_token_masks(ins[1], ins[2]) == ([0] * 6, [0, 0, 0, 1, 1, 0, 0, 0])
