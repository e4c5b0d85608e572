"""Preference losses of the DPO family as pure functions, looked up by name (no if-chain).

Every loss takes the per-pair log-ratios of policy vs reference,
    c = log pi(y_w|x) - log pi_ref(y_w|x),   r = log pi(y_l|x) - log pi_ref(y_l|x),
plus `beta` and `label_smoothing`, and returns the per-pair loss (shape [B]). How the sequence
log-probs are formed (token sum, token mean, sum over differing tokens only) is declared by the
`LossSpec`, so the trainer computes them once for any loss.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import torch
import torch.nn.functional as F


def sigmoid_loss(c: torch.Tensor, r: torch.Tensor, beta: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """DPO: -log sigmoid(beta (c - r)); with label smoothing eps, the conservative (cDPO) mix."""
    z = beta * (c - r)
    return -(1.0 - label_smoothing) * F.logsigmoid(z) - label_smoothing * F.logsigmoid(-z)


def hinge_loss(c: torch.Tensor, r: torch.Tensor, beta: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """SLiC hinge: max(0, 1 - beta (c - r))."""
    return torch.relu(1.0 - beta * (c - r))


def ipo_loss(c: torch.Tensor, r: torch.Tensor, beta: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """IPO: (c - r - 1/(2 beta))^2; on summed sequence log-probs as VL-RLHF, or token means as TRL
    (`ipo_logps`, see `loss_spec`)."""
    return (c - r - 1.0 / (2.0 * beta)) ** 2


def kto_pair_loss(c: torch.Tensor, r: torch.Tensor, beta: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """Paired KTO (HALOs eq. 7), as in TRL <= 0.8 / VL-RLHF.

    The KL reference point of each side is the *other* side's batch-mean log-ratio, clamped at 0:
        chosen term   1 - sigmoid(beta (c - KL_r)),   KL_r = max(mean(r), 0)
        rejected term 1 - sigmoid(beta (KL_c - r)),   KL_c = max(mean(c), 0)
    The original returns the 2B terms and averages them; returning their per-pair mean gives the
    same batch mean with the [B] shape every loss here has.
    """
    kl_c = c.mean().clamp(min=0)
    kl_r = r.mean().clamp(min=0)
    chosen_term = 1.0 - torch.sigmoid(beta * (c - kl_r))
    rejected_term = 1.0 - torch.sigmoid(beta * (kl_c - r))
    return 0.5 * (chosen_term + rejected_term)


@dataclass(frozen=True)
class LossSpec:
    """A loss plus how its sequence log-probs are built from per-token log-probs."""

    fn: Callable[..., torch.Tensor]
    average_logps: bool = False  # mean over completion tokens instead of the sum (TRL's IPO)
    # DDPO: sum only over differing tokens. "replaced" = VL-RLHF's replaced spans of the padded label
    # rows (`replaced_token_masks`); "changed" = every token outside shared runs (`diff_token_masks`).
    diff_mask: str | None = None


# The defaults are VL-RLHF's (summed log-probs everywhere, its DDPO mask); `loss_spec` applies the switches.
LOSSES: dict[str, LossSpec] = {
    "sigmoid": LossSpec(sigmoid_loss),
    "hinge": LossSpec(hinge_loss),
    "ipo": LossSpec(ipo_loss),
    "kto_pair": LossSpec(kto_pair_loss),
    # Dense DPO (RLHF-V naming, VL-RLHF semantics): the sigmoid loss on diff-masked log-probs.
    "ddpo": LossSpec(sigmoid_loss, diff_mask="replaced"),
}


def loss_spec(loss_type: str, ipo_logps: str = "sum", ddpo_mask: str = "replaced") -> LossSpec:
    """LOSSES[loss_type] with the `ipo_logps` (sum | mean) and `ddpo_mask` (replaced | changed) switches."""
    spec = LOSSES[loss_type]
    if loss_type == "ipo":
        spec = replace(spec, average_logps=ipo_logps == "mean")
    if loss_type == "ddpo":
        spec = replace(spec, diff_mask=ddpo_mask)
    return spec


def rpo_nll(chosen_logps: torch.Tensor, chosen_tokens: torch.Tensor, average_logps: bool) -> torch.Tensor:
    """RPO's extra term (Pang et al. 2024): the token-mean NLL of the chosen responses, batch-averaged.

    Added to any DPO-family loss as `rpo_alpha * rpo_nll(...)`; it keeps the chosen answers likely while
    the preference term pushes the rejected ones down (without it, small models drift to short answers).
    """
    per_row = chosen_logps if average_logps else chosen_logps / chosen_tokens.clamp_min(1)
    return -per_row.mean()


def sequence_logps(per_token_logps: torch.Tensor, mask: torch.Tensor, average: bool = False) -> torch.Tensor:
    """Sum (or mean) of per-token log-probs over positions where mask is 1. Shapes [B, T] -> [B]."""
    total = (per_token_logps * mask).sum(dim=-1)
    if average:
        return total / mask.sum(dim=-1).clamp(min=1)
    return total


def diff_token_masks(chosen: Sequence[int], rejected: Sequence[int], min_match: int = 3) -> tuple[list[int], list[int]]:
    """`ddpo_mask: changed` (ours): token-level diff of two completions, 1 marks a token that differs
    (inserted and deleted tokens included), 0 a shared one.

    Matching blocks from difflib shorter than `min_match` tokens count as different, because a
    one- or two-token coincidence ("the", ".") inside rewritten text is not a shared span.
    """
    mask_c, mask_r = [1] * len(chosen), [1] * len(rejected)
    matcher = difflib.SequenceMatcher(None, list(chosen), list(rejected), autojunk=False)
    for a, b, size in matcher.get_matching_blocks():
        if size < min_match:
            continue
        mask_c[a : a + size] = [0] * size
        mask_r[b : b + size] = [0] * size
    return mask_c, mask_r


def replaced_spans(a: Sequence[int], b: Sequence[int], min_match: int = 3) -> tuple[set[int], set[int]]:
    """Positions of a and b inside "replace" spans, as VL-RLHF's diff_lib: the gaps before, between and
    after difflib's matching blocks of >= `min_match` items (difflib defaults, autojunk included), kept
    only where both sides are non-empty. An insertion or deletion alone marks nothing."""
    blocks = difflib.SequenceMatcher(None, list(a), list(b)).get_matching_blocks()
    kept = [m for m in blocks[:-1] if m.size >= min_match] + [blocks[-1]]  # the last is the (len, len, 0) end
    in_a, in_b = set(), set()
    ia = ib = 0
    for m in kept:
        if m.a > ia and m.b > ib:
            in_a.update(range(ia, m.a))
            in_b.update(range(ib, m.b))
        ia, ib = m.a + m.size, m.b + m.size
    return in_a, in_b


def replaced_token_masks(rows: Sequence[tuple[int, Sequence[int], Sequence[int]]],
                         min_match: int = 3) -> list[tuple[list[int], list[int]]]:
    """VL-RLHF's DDPO masks for one batch of (prompt length, chosen ids, rejected ids).

    Like its get_batch_logps, the diff runs over the label rows: prompt positions and the padding up to
    the batch's widest row read as token 0, and the rows are shifted by one (labels[:, 1:]). So the
    batch's padding can pair with an appended tail, which then counts as replaced. Returns, per pair,
    0/1 masks over the chosen and the rejected completion tokens.
    """
    width = max(p + max(len(c), len(r)) for p, c, r in rows)
    out = []
    for p, c, r in rows:
        a = ([0] * p + list(c) + [0] * (width - p - len(c)))[1:]
        b = ([0] * p + list(r) + [0] * (width - p - len(r)))[1:]
        in_a, in_b = replaced_spans(a, b, min_match)
        out.append(([int(p + j - 1 in in_a) for j in range(len(c))], [int(p + j - 1 in in_b) for j in range(len(r))]))
    return out
