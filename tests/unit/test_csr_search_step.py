"""The one group beam search step both engines run (`training.csr.search.GroupBeams`): fed log-probs
(normalized=True, as a driver handing over top-N log-probs does) it steps exactly as fed logits, and
suppressed ids stay out. Model-driven identity (lockstep == pool == transformers 4.37.2) is in
tests/unit/test_csr_groupbeam_reference.py and tests/unit/test_csr_pool.py."""
from __future__ import annotations

import torch

from training.csr.search import GroupBeams, SearchSpec

V = 40


def _logits(keys, step, n_rows):
    """Row logits that depend on (node, step, row) only, so two runs see the same numbers."""
    out = []
    for k in keys:
        g = torch.Generator().manual_seed(1000 * k + step)
        out.append(torch.randn((n_rows, V), generator=g) * 3)
    return torch.cat(out)


def _run(spec, transform, normalized, nodes=4):
    """Drive a Search over `nodes` nodes that join one per step; (every step's outputs, hypotheses)."""
    search = GroupBeams(spec, torch.device("cpu"))
    steps, hyps, t = [], {}, 0
    todo = list(range(nodes))
    while todo or len(search):
        if todo:
            search.add([todo.pop(0)])
        ks = list(search.keys)
        scores = transform(_logits(ks, t, spec.num_beams))
        before = scores.clone()
        ended, rows, toks = search.advance(scores, normalized=normalized)
        assert torch.equal(scores, before)  # the caller's tensor is left alone
        steps.append((rows.tolist(), toks.tolist(), [k for k, _ in ended]))
        hyps.update({k: [(h.ids, h.score) for h in hs] for k, hs in ended})
        t += 1
    return steps, hyps


def test_log_probs_in_step_exactly_as_logits():
    spec = SearchSpec(num_beams=4, num_beam_groups=2, diversity_penalty=1.0, max_new_tokens=6, stop_ids=(3,),
                      suppress_ids=(5, 7), pad_id=0)
    raw = _run(spec, lambda x: x, normalized=False)
    fed = _run(spec, lambda x: torch.log_softmax(x, -1), normalized=True)
    assert raw == fed
    assert len(raw[1]) == 4 and all(len(h) == 4 for h in raw[1].values())


def test_top_n_log_probs_run_and_suppression_still_applies():
    """-inf outside each row's top 8 (and 5 among its best, then suppressed): every hypothesis is finite
    and made of top-N tokens only, none suppressed."""
    spec = SearchSpec(num_beams=5, num_beam_groups=5, diversity_penalty=3.0, max_new_tokens=5, stop_ids=(3,),
                      suppress_ids=(5,), pad_id=0)

    def top_n(x):
        x = x.clone()
        x[:, 5] = 100.0  # the suppressed id is every row's best: it must still never be picked
        lp = torch.log_softmax(x, -1)
        cut = lp.topk(8, -1).values[:, -1:]
        return torch.where(lp >= cut, lp, torch.full_like(lp, float("-inf")))

    _, hyps = _run(spec, top_n, normalized=True)
    assert len(hyps) == 4
    for hs in hyps.values():
        assert len(hs) == 5
        assert all(5 not in ids and torch.isfinite(torch.tensor(s)) for ids, s in hs)
