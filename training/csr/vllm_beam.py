"""The CSR group beam search (`tree.expander: group_beam`) driven one token at a time from top-N log-probs:
how `tree.engine: vllm` runs it (training/csr/vllm_expand.py, docs/engines.md "CSR trees on vLLM").

    trees = grow_topn(rules, records, next_topn, vocab, n_logprobs)   # whole trees, continuous refill
    hyps = search_topn(n_nodes, next_topn, spec, vocab, n_logprobs)  # one set of nodes searched to the end

`next_topn(rows)` answers, for each distinct running row (the node, the beam's tokens so far), the top-N
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
exact tie: at the N-th place, or of two candidates' running scores in float32 (log-probs a few 1e-7 apart
added to the same running score), which `torch.topk` may order differently over the top-N tensor than over
the full vocabulary (docs/csr-engine.md "On vLLM" counts them).

Rows of one node with the same tokens (all B rows at a node's first step; groups that chose the same
sentence) are one request. `TopNStats` counts the calls and rows.

Scheduling (`grow_topn`): the pool engine's continuous refill (`training.csr.schedule.Refill`): every step is ONE call carrying the distinct rows of every node
searching, of any prompt and level; a prompt's level is grown and pruned as soon as its last node ended, its
kept nodes join at the next step (their first request is their context: prompt + response), and prompts
start as trees complete, within the worker's KV capacity where it reports one (a node holds its context once,
for the prefix cache, and its beams' tokens) and the optional caps `tree.prompt_batch` (resident) and
`tree.batch_nodes` (searching). Each node's
state in `GroupBeams` is its own (its step counter, beams, hypotheses; `advance` never mixes nodes), so a
node's hypotheses do not depend on which nodes share its calls: the trees are the reference's. Without a
reported capacity there is no KV bound: vLLM pages and evicts its own cache.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from training.csr.rules import Stats
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


class TopNBeams:
    """The group beam search of many nodes stepped from top-N log-probs, one `next_topn` call per step; nodes
    may join between steps (`add`). Beam row j of the state is `rows[j]` = (node key, its tokens so far)."""

    def __init__(self, spec: SearchSpec, vocab: int, n_logprobs: int, stats: TopNStats | None = None):
        need = logprobs_needed(spec)
        if n_logprobs < min(need, vocab):
            raise ValueError(f"top-{n_logprobs} log-probs cannot decide this search exactly: it needs {need}")
        self.vocab, self.B = vocab, spec.num_beams
        self.stats = stats if stats is not None else TopNStats()
        self.search = GroupBeams(spec, torch.device("cpu"))  # the step both HF engines take (search.py)
        self.rows: list[tuple[Hashable, tuple[int, ...]]] = []

    def __len__(self) -> int:
        return len(self.search)

    def add(self, keys: list) -> None:
        """Nodes (hashable keys) that start their search at the next step."""
        self.search.add(keys)
        self.rows += [(k, ()) for k in keys for _ in range(self.B)]

    def step(self, next_topn: Callable[[list[tuple[Hashable, tuple[int, ...]]]], list[TopN]]) -> list[tuple[Hashable, list[Hyp]]]:
        """One step of every node from ONE `next_topn` call over the distinct rows: the nodes that ended, with
        their `num_beams` hypotheses best first."""
        distinct: dict[tuple[Hashable, tuple[int, ...]], int] = {}
        idx = [distinct.setdefault(r, len(distinct)) for r in self.rows]
        tops = next_topn(list(distinct))
        if len(tops) != len(distinct):
            raise RuntimeError(f"top-N log-probs for {len(tops)} rows, {len(distinct)} asked")
        st = self.stats
        st.calls += 1
        st.requests += len(distinct)
        st.beam_rows += len(self.rows)
        st.max_requests = max(st.max_requests, len(distinct))
        lp = dense_logprobs(tops, self.vocab).index_select(0, torch.tensor(idx, dtype=torch.long))
        ended, keep, toks = self.search.advance(lp, normalized=True)
        self.rows = [(self.rows[r][0], self.rows[r][1] + (t,)) for r, t in zip(keep.tolist(), toks.tolist())]
        return ended


def search_topn(n_nodes: int, next_topn: Callable[[list[tuple[int, tuple[int, ...]]]], list[TopN]],
                spec: SearchSpec, vocab: int, n_logprobs: int, stats: TopNStats | None = None) -> list[list[Hyp]]:
    """Per node, its `num_beams` hypotheses best first (`search.group_beam_search`'s result), from top-N
    log-probs: `next_topn` gets the distinct running rows (node index, beam tokens) of one step."""
    beams = TopNBeams(spec, vocab, n_logprobs, stats)
    beams.add(list(range(n_nodes)))
    out: dict[int, list[Hyp]] = {}
    while len(beams):
        out.update(beams.step(next_topn))
    return [out[i] for i in range(n_nodes)]


def grow_topn(rules, records: Sequence[dict], next_topn: Callable[[list[tuple[Any, int, tuple[int, ...]]]], list[TopN]],
              vocab: int, n_logprobs: int, stats: TopNStats | None = None, progress: bool = False,
              tree_stats: Stats | None = None, kv_tokens: int | None = None) -> list:
    """The trees of `records` (in record order) under `rules` (a `rules.TreeRules`), searched from top-N
    log-probs under the pool's continuous refill (`schedule.Refill`). `next_topn` gets the distinct rows of one
    step as (prompt: rules.Prompt, node id, beam tokens). `kv_tokens`: the engine's KV capacity in tokens
    (None: no bound); a node searching holds its context once (the prefix cache) and its beams' tokens."""
    from evalsuite.progress import progress_bar

    from training.csr.schedule import Refill

    beams = TopNBeams(rules.spec, vocab, n_logprobs, stats)
    s = Refill(rules, tree_stats if tree_stats is not None else Stats(), records)
    grown = rules.spec.num_beams * rules.spec.max_new_tokens
    held: dict[tuple[int, int], int] = {}  # tokens of each node searching
    starts: dict[int, Any] = {}  # prompts started that did not fit yet

    def cost(r: int, nid: int) -> int:
        tree = s.trees[r].prompt.tree
        return len(tree.prompt_ids) + len(tree.nodes[nid].response_ids) + grown

    def fits(n: int, first: bool) -> bool:
        return first or kv_tokens is None or sum(held.values()) + n <= kv_tokens

    bar = progress_bar(total=len(records), desc="csr trees", unit="tree", disable=not progress)
    try:
        while s.busy(len(beams)):
            joining = []
            for r, nid, _ in s.ready[:s.node_room(len(beams))]:
                c = cost(r, nid)
                if not fits(c, not joining and not len(beams)):
                    break
                joining.append((r, nid))
                held[(r, nid)] = c
            s.ready = s.ready[len(joining):]
            for _ in range(min(s.prompt_room(len(beams), len(joining)), len(s.waiting))):
                r = s.waiting[0]
                if r not in starts:
                    starts[r] = rules.start(records[r])
                c = len(starts[r].tree.prompt_ids) + grown
                if not fits(c, not joining and not len(beams)):
                    break
                s.start(s.waiting.pop(0), starts.pop(r))
                joining.append((r, 0))
                held[(r, 0)] = c
            beams.add(joining)
            ended = beams.step(lambda rows: next_topn([(s.trees[r].prompt, nid, toks) for (r, nid), toks in rows]))
            for (r, nid), hyps in ended:
                held.pop((r, nid), None)
                s.node_ended(r, nid, hyps)
            bar.update(len(s.done) - bar.n)
    finally:
        bar.close()
    return s.result()


class VllmTreeEngine:
    """`tree.engine: vllm` + group_beam: whole trees grown by `grow_topn` on a `vllm_expand.VllmSampler`'s worker,
    bounded by the worker's KV capacity where it reports one."""

    def __init__(self, rules, sampler, stats: Stats):
        self.rules, self.sampler, self.stats = rules, sampler, stats

    def grow(self, records: Sequence[dict], progress: bool = True) -> list:
        return self.sampler.grow(self.rules, records, progress=progress, stats=self.stats)
