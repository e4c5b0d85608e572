"""The CSR group beam search (`tree.expander: group_beam`) driven one token at a time from top-N log-probs:
how `tree.engine: vllm` runs it (training/csr/vllm_expand.py, docs/engines.md "CSR trees on vLLM").

    hyps = search_topn(n_nodes, next_topn, spec, vocab, n_logprobs)

`next_topn(rows)` answers, for each running row (node index, the beam's tokens so far), the top-N
(token id, log-prob) of the next position: on vLLM one request per row with `max_tokens=1, logprobs=N`
(vLLM's default `logprobs_mode: raw_logprobs` is the log-softmax of the raw logits, the quantity
`search.group_beam_search` starts from before it bans suppressed ids and applies the diversity penalty).
This is how vLLM's own offline beam search steps: one token per call, the shared context served by the
prefix cache. The step itself is `training.csr.search.GroupBeams.advance` (both HF engines', `search.py`'s
rules step for step), on a dense [rows, vocab] tensor holding the N returned log-probs and -inf elsewhere.

Why the top N suffice (exactness). At a step, group g of a node ranks the candidates (beam, token) by
running score + log p(token | beam) - diversity_penalty x (times earlier groups fed the token at this
step), with suppressed ids at -inf, and keeps the best K = `Search.K` = max(2, 1 + #stop ids) x S of
them (S = beams per group). The penalty only LOWERS scores, of at most (G - 1) x S tokens (what the
earlier groups fed, pads included); suppression lowers |suppress| tokens. So within one beam, the K best
penalised tokens lie among its N best raw tokens when N >= K + (G - 1) x S + |suppress|: a token outside
the raw top N is beaten, after the penalties, by at least K unpenalised tokens of the top N. The group's
K best candidates over its beams are each among their own beam's K best, so the -inf outside the top N
never changes what the step picks, and the log-probs it adds are the returned ones. `logprobs_needed`
is that N; a smaller one is refused. What can still differ from HF's search is the log-probs themselves
(vLLM's kernels against HF's forward: the last bits, i.e. a different tree only at a near-tie) and an
exact tie at the N-th place, where the two engines may order equal values differently.

Rows of one node with the same tokens (all B rows at a node's first step; groups that chose the same
sentence) are one request. `TopNStats` counts the calls and rows.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from training.csr.search import GroupBeams, Hyp, SearchSpec

TopN = Sequence[Sequence[float]]  # [(token id, log-prob), ...] of one row (ids as numbers)


@dataclass
class TopNStats:
    """What the search asked of the engine: calls (one per step), requests (distinct rows) and beam rows."""

    calls: int = 0
    requests: int = 0
    beam_rows: int = 0
    max_requests: int = 0

    def line(self) -> str:
        per = self.requests / self.calls if self.calls else 0.0
        return (f"{self.calls} vLLM calls, {self.requests} requests ({per:.1f} per call, at most "
                f"{self.max_requests}), {self.beam_rows} beam rows")


def logprobs_needed(spec: SearchSpec) -> int:
    """N with which the top-N search equals the full-vocabulary one (module docstring)."""
    s = GroupBeams(spec, torch.device("cpu"))  # K, G, S as the search derives them
    return s.K + (s.G - 1) * s.S + len(set(spec.suppress_ids))


def dense_logprobs(tops: Sequence[TopN], vocab: int) -> torch.Tensor:
    """[rows, vocab] float32: each row's returned log-probs at their ids, -inf elsewhere."""
    out = torch.full((len(tops), vocab), float("-inf"))
    for i, pairs in enumerate(tops):
        if pairs:
            ids = torch.tensor([int(p[0]) for p in pairs], dtype=torch.long)
            out[i, ids] = torch.tensor([float(p[1]) for p in pairs], dtype=torch.float32)
    return out


def search_topn(n_nodes: int, next_topn: Callable[[list[tuple[int, tuple[int, ...]]]], list[TopN]],
                spec: SearchSpec, vocab: int, n_logprobs: int, stats: TopNStats | None = None) -> list[list[Hyp]]:
    """Per node, its `num_beams` hypotheses best first (`search.group_beam_search`'s result), from top-N
    log-probs: `next_topn` gets the distinct running rows (node index, beam tokens) of one step."""
    need = logprobs_needed(spec)
    if n_logprobs < min(need, vocab):
        raise ValueError(f"top-{n_logprobs} log-probs cannot decide this search exactly: it needs {need}")
    stats = stats if stats is not None else TopNStats()
    search = GroupBeams(spec, torch.device("cpu"))  # the step both HF engines take (search.py)
    search.add(list(range(n_nodes)))
    B = spec.num_beams
    rows: list[tuple[int, tuple[int, ...]]] = [(i, ()) for i in range(n_nodes) for _ in range(B)]
    out: dict[int, list[Hyp]] = {}
    while len(search):
        distinct: dict[tuple[int, tuple[int, ...]], int] = {}
        idx = [distinct.setdefault(r, len(distinct)) for r in rows]
        tops = next_topn(list(distinct))
        if len(tops) != len(distinct):
            raise RuntimeError(f"top-N log-probs for {len(tops)} rows, {len(distinct)} asked")
        stats.calls += 1
        stats.requests += len(distinct)
        stats.beam_rows += len(rows)
        stats.max_requests = max(stats.max_requests, len(distinct))
        lp = dense_logprobs(tops, vocab).index_select(0, torch.tensor(idx, dtype=torch.long))
        ended, keep, toks = search.advance(lp, normalized=True)
        for node, hyps in ended:
            out[node] = hyps
        rows = [(rows[r][0], rows[r][1] + (t,)) for r, t in zip(keep.tolist(), toks.tolist())]
    return [out[i] for i in range(n_nodes)]
