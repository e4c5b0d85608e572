"""Where two runs' CSR trees of the same prompts part (benches and tests comparing tree engines): every
differing tree with its first difference and the score gap of the two candidates that swapped there. A
difference is acceptable only at a near-tie (gap <= 1e-5: float rounding of two engines' logits)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

@dataclass(frozen=True)
class Difference:
    """Where two trees of one prompt first part. `gap` is the score distance of the two candidates that
    swapped there: for a different sentence, the sentence score of tree a's node and of the candidate that
    took its place in tree b; for a different pruning, the cumulative scores of the node and of the node
    whose pruning went the other way (`other`), the larger of the two trees' distances. Anything that is
    not a swap of two scored candidates (a different child count, a different final/junk status, a tree
    missing) has gap inf: it is never a near-tie."""

    tree: str
    node: int
    what: str
    gap: float
    other: int | None = None

    def near_tie(self, tol: float = 1e-5) -> bool:
        return self.gap <= tol


def _levels(tree) -> dict[int, list]:
    out: dict[int, list] = {}
    for n in tree.nodes:
        out.setdefault(n.depth, []).append(n)
    return out


def first_difference(a, b, score_tol: float = 1e-5) -> Difference | None:
    """None when trees `a` and `b` agree (structure, token ids, statuses; scores within `score_tol`).

    Level by level (a level's sentences decide its pruning, and its pruning the next level): first the
    level's sentences in node order, then its statuses, then its scores."""
    la, lb = _levels(a), _levels(b)
    for depth in sorted(set(la) | set(lb)):
        xs, ys = la.get(depth, []), lb.get(depth, [])
        for x, y in zip(xs, ys):
            if (x.parent, x.sentence_ids) != (y.parent, y.sentence_ids):
                # a different child count shifts later siblings under another parent: not a swap
                gap = abs(x.sentence_score - y.sentence_score) if x.parent == y.parent else float("inf")
                return Difference(a.id, x.id, "sentence", gap)
        if len(xs) != len(ys):
            return Difference(a.id, min(len(a.nodes), len(b.nodes)), "node count", float("inf"))
        for x, y in zip(xs, ys):
            if x.status != y.status:
                return _status_difference(a, b, xs, ys, x, y)
        for x, y in zip(xs, ys):
            if abs(x.sentence_score - y.sentence_score) > score_tol:
                return Difference(a.id, x.id, "score", abs(x.sentence_score - y.sentence_score))
    return None


def _status_difference(a, b, xs, ys, x, y) -> Difference:
    """A node kept in one tree and pruned in the other swapped with a node of its level whose pruning
    went the other way; the nearest such node in cumulative score is the one that took its place."""
    what = f"status {x.status} vs {y.status}"
    if (x.status == "pruned") == (y.status == "pruned"):
        return Difference(a.id, x.id, what, float("inf"))  # not decided by pruning
    pruned_in_a = x.status == "pruned"
    others = [(u, v) for u, v in zip(xs, ys)
              if (u.status == "pruned") != (v.status == "pruned") and (u.status == "pruned") != pruned_in_a]
    if not others:
        return Difference(a.id, x.id, what, float("inf"))
    gap, z = min((max(abs(x.lm_score - u.lm_score), abs(y.lm_score - v.lm_score)), u.id) for u, v in others)
    return Difference(a.id, x.id, what, gap, other=z)


def differences(a_trees: Sequence, b_trees: Sequence, score_tol: float = 1e-5) -> list[Difference]:
    """Every differing tree of two runs over the same prompts, each with its first difference; a prompt
    whose tree is in one run only counts too (gap inf)."""
    b_by_id = {t.id: t for t in b_trees}
    a_ids = {t.id for t in a_trees}
    out = []
    for t in a_trees:
        if t.id not in b_by_id:
            out.append(Difference(t.id, 0, "tree missing in b", float("inf")))
        elif (d := first_difference(t, b_by_id[t.id], score_tol)) is not None:
            out.append(d)
    out += [Difference(t.id, 0, "tree missing in a", float("inf")) for t in b_trees if t.id not in a_ids]
    return out
