"""Which of equal-reward complete paths become chosen / rejected (`pairs.tie_order`, docs/csr-fidelity.md).

Released (inference_csr/construct.py): `dfs` lists the paths depth first, children in the order the
search returned them, and a stable sort by mean cost keeps that order among ties: chosen = the first
best, rejected = the last worst. Ours (`node_id`): paths by leaf node id, which is the breadth-first
order the search creates nodes in. tests/data/csr_ties/released.json holds random tie-heavy trees with
the released code's own picks (tests/data/csr_ties/make_reference.py ran it)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.csr.config import PairConfig, RewardConfig
from training.csr.generate import Node, Tree
from training.csr.pairs import select_pair
from training.csr.reward import path_rewards

DATA = Path(__file__).resolve().parents[1] / "data" / "csr_ties" / "released.json"


def _tree(spec: list[dict]) -> Tree:
    """[{id, parent, final, children}] in id order -> a Tree (statuses as the search leaves them)."""
    nodes = []
    for n in spec:
        depth = 0 if n["parent"] is None else nodes[n["parent"]].depth + 1
        status = "final" if n["final"] else ("expanded" if n["children"] else "pruned")
        nodes.append(Node(id=n["id"], parent=n["parent"], depth=depth, prefix_ids=[], sentence_ids=[n["id"]],
                          text=f"s{n['id']}" if n["parent"] is not None else "", sentence_score=0.0, lm_score=0.0,
                          is_final=n["final"], status=status, children=list(n["children"])))
    return Tree(id="t", image="x.png", question="Describe.", prompt_ids=[1], nodes=nodes)


def _pick(tree: Tree, scores: dict, order: str, lam: float = 0.9) -> tuple[list[int], list[int]]:
    cfg = PairConfig(tie_order=order)
    chosen, rejected = select_pair(path_rewards(tree, scores, RewardConfig(lam=lam), distinct=False, order=order), cfg)
    return chosen.path, rejected.path


def _example() -> tuple[Tree, dict]:
    """root -> A (1, not final), B (2, final); A -> A1 (3, final). lam 0: a sentence's cost is its language
    rank among its siblings. A (lm -1) ranks 1/2, B (lm -2) 2/2, A1 (only child) 1/1: path B costs
    1/2 = 0.5, path A1 (1/2 + 1)/3 = 0.5, exactly; a tie."""
    tree = _tree([{"id": 0, "parent": None, "final": False, "children": [1, 2]},
                  {"id": 1, "parent": 0, "final": False, "children": [3]},
                  {"id": 2, "parent": 0, "final": True, "children": []},
                  {"id": 3, "parent": 1, "final": True, "children": []}])
    scores = {1: {"lm": -1.0, "cos": 0.5, "clip": 50.0}, 2: {"lm": -2.0, "cos": 0.5, "clip": 50.0},
              3: {"lm": -1.0, "cos": 0.5, "clip": 50.0}}
    return tree, scores


def test_complete_paths_depth_first_as_released_or_by_node_id():
    tree, _ = _example()
    assert tree.complete_paths() == [[0, 1, 3], [0, 2]]
    assert tree.complete_paths("node_id") == [[0, 2], [0, 1, 3]]
    with pytest.raises(ValueError, match="path order"):
        tree.complete_paths("bfs")


def test_tie_between_b_and_a1():
    """Both paths cost 0.5. Released: depth first A1 comes before B, so A1 is chosen and B (the last of
    the tie) rejected. node_id: B (leaf 2) before A1 (leaf 3): B chosen, A1 rejected."""
    tree, scores = _example()
    assert _pick(tree, scores, "released", lam=0.0) == ([0, 1, 3], [0, 2])
    assert _pick(tree, scores, "node_id", lam=0.0) == ([0, 2], [0, 1, 3])


def _lm(*pairs) -> dict:
    return {nid: {"lm": lm, "cos": 0.5, "clip": 50.0} for nid, lm in pairs}


def test_tie_at_the_worst_only():
    """root -> 1 (not final), 2 (final); 1 -> 3, 4 (final). lam 0, language ranks: 1 -> 1/2, 2 -> 1;
    3 -> 1/2, 4 -> 1. Paths: [0,2] 1/2; [0,1,3] (1/2 + 1/2)/3 = 1/3 (best, alone); [0,1,4] (1/2 + 1)/3 = 1/2.
    Depth first [0,1,3], [0,1,4], [0,2]: released rejects [0,2], the last of the worst; node_id order
    [0,2], [0,1,3], [0,1,4] rejects [0,1,4]."""
    tree = _tree([{"id": 0, "parent": None, "final": False, "children": [1, 2]},
                  {"id": 1, "parent": 0, "final": False, "children": [3, 4]},
                  {"id": 2, "parent": 0, "final": True, "children": []},
                  {"id": 3, "parent": 1, "final": True, "children": []},
                  {"id": 4, "parent": 1, "final": True, "children": []}])
    scores = _lm((1, -1.0), (2, -2.0), (3, -1.0), (4, -2.0))
    assert _pick(tree, scores, "released", lam=0.0) == ([0, 1, 3], [0, 2])
    assert _pick(tree, scores, "node_id", lam=0.0) == ([0, 1, 3], [0, 1, 4])


def test_tie_at_the_best_only():
    """root -> 1 (not final), 2, 3, 4 (final); 1 -> 5, 6 (final). lam 0: 1..4 rank 1/4, 2/4, 3/4, 1 (lm -1..-4);
    5, 6 rank 1/2, 1. Paths: [0,2] (1/2)/2 = 1/4; [0,3] 3/8; [0,4] 1/2 (worst, alone); [0,1,5] (1/4 + 1/2)/3
    = 1/4; [0,1,6] 5/12. Released chooses [0,1,5] (first depth first), node_id [0,2] (leaf 2 < leaf 5)."""
    tree = _tree([{"id": 0, "parent": None, "final": False, "children": [1, 2, 3, 4]},
                  {"id": 1, "parent": 0, "final": False, "children": [5, 6]},
                  {"id": 2, "parent": 0, "final": True, "children": []},
                  {"id": 3, "parent": 0, "final": True, "children": []},
                  {"id": 4, "parent": 0, "final": True, "children": []},
                  {"id": 5, "parent": 1, "final": True, "children": []},
                  {"id": 6, "parent": 1, "final": True, "children": []}])
    scores = _lm((1, -1.0), (2, -2.0), (3, -3.0), (4, -4.0), (5, -1.0), (6, -2.0))
    assert _pick(tree, scores, "released", lam=0.0) == ([0, 1, 5], [0, 4])
    assert _pick(tree, scores, "node_id", lam=0.0) == ([0, 2], [0, 4])


def _released_cases():
    return json.loads(DATA.read_text())


def test_released_picks_on_random_tie_heavy_trees():
    """The released code's chosen and rejected paths (every path, no guard; lam 0.9, 0 or 1) on 240 random
    trees whose scores come from small sets; node_id order must pick other best and other worst paths
    on some of them, or they test nothing."""
    doc = _released_cases()
    assert "353de42" in doc["source"]
    differ = [0, 0]
    for case in doc["trees"]:
        tree = _tree(case["nodes"])
        scores = {n["id"]: {"lm": n["lm"], "cos": n["cos"], "clip": 100 * n["cos"]} for n in case["nodes"][1:]}
        assert tree.complete_paths() == case["dfs_paths"]
        want = (case["chosen"], case["rejected"])
        assert _pick(tree, scores, "released", lam=case["clip_alpha"]) == want
        ours = _pick(tree, scores, "node_id", lam=case["clip_alpha"])
        differ[0] += ours[0] != want[0]
        differ[1] += ours[1] != want[1]
    assert min(differ) >= 3, differ  # at generation: 6 chosen and 12 rejected differ


def test_pairs_default_is_released_and_the_switch_is_checked():
    from evalsuite.errors import UserError

    assert PairConfig().tie_order == "released"
    with pytest.raises(UserError, match="pairs.tie_order"):
        PairConfig(tie_order="dfs")
