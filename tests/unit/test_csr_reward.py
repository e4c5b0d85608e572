"""CSR rewards and pair selection: the invariants of docs/csr-method.md §10.2 and hand-worked aggregation values."""
from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from training.csr.config import PairConfig, RewardConfig
from training.csr.generate import Node, Tree
from training.csr.pairs import build_pairs, llava_record, pair_stats, select_pair
from training.csr.reward import node_costs, path_rewards, rank_path_score, sibling_ranks

OURS = {"template": "single", "post_eos": "cut", "guards": True}  # our pair rules (configs/csr_tiny.yaml)


def _node(i, parent, depth, ids, final=False, status="active", text=None, eos=False):
    return Node(id=i, parent=parent, depth=depth, prefix_ids=[], sentence_ids=ids, text=text or f"sentence {i}",
                sentence_score=0.0, lm_score=0.0, is_final=final, eos_at=len(ids) - 1 if eos else None, status=status)


def hand_tree() -> Tree:
    """root 0 -> 1, 2 (final), 3 (pruned); 1 -> 4 (final), 5 (final)."""
    nodes = [_node(0, None, 0, [], status="expanded", text=""), _node(1, 0, 1, [11], status="expanded"),
             _node(2, 0, 1, [12], final=True, status="final"), _node(3, 0, 1, [13], status="pruned"),
             _node(4, 1, 2, [14], final=True, status="final"), _node(5, 1, 2, [15], final=True, status="final")]
    nodes[0].children, nodes[1].children = [1, 2, 3], [4, 5]
    for n in nodes[1:]:
        n.prefix_ids = [] if n.parent == 0 else [11]
    return Tree(id="t", image="x.png", question="Describe.", prompt_ids=[1, 2], nodes=nodes)


SCORES = {1: {"lm": -1.0, "cos": 0.3, "clip": 30.0}, 2: {"lm": -2.0, "cos": 0.5, "clip": 50.0},
          3: {"lm": -3.0, "cos": 0.1, "clip": 10.0}, 4: {"lm": -1.0, "cos": 0.2, "clip": 20.0},
          5: {"lm": -2.0, "cos": 0.4, "clip": 40.0}}


def test_sibling_ranks_invariants():
    """Ranks lie in (0, 1], exactly one is 1/n and one is 1.0, ties included."""
    rng = random.Random(0)
    for n in range(1, 9):
        vals = [rng.choice([0.1, 0.2, 0.3]) for _ in range(n)]
        r = sibling_ranks(vals)
        assert all(0 < x <= 1 for x in r)
        assert r.count(1 / n) == 1 and r.count(1.0) == 1
        assert sorted(r) == [(i + 1) / n for i in range(n)]
    assert sibling_ranks([0.5, 2.0, 1.0]) == [1.0, 1 / 3, 2 / 3]


def test_rank_costs_and_path_scores_by_hand():
    """Root siblings 1,2,3: rank_lm 1/3, 2/3, 1; rank_clip (by cos .3,.5,.1) 2/3, 1/3, 1;
    cost = .1 rank_lm + .9 rank_clip: 0.63333, 0.36667, 1.0. Siblings 4,5: rank_lm 1/2, 1;
    rank_clip 1, 1/2; cost 0.95, 0.55. Paths: [0,2] 0.36667/2 = 0.18333, [0,1,4] (0.63333+0.95)/3 =
    0.52778, [0,1,5] (0.63333+0.55)/3 = 0.39444 -> chosen [0,2] (min), rejected [0,1,4] (max)."""
    tree = hand_tree()
    costs = node_costs(tree, {k: v["lm"] for k, v in SCORES.items()}, {k: v["cos"] for k, v in SCORES.items()}, 0.9)
    assert costs == pytest.approx({1: 0.633333, 2: 0.366667, 3: 1.0, 4: 0.95, 5: 0.55}, abs=1e-6)
    paths = path_rewards(tree, SCORES, RewardConfig(mode="rank", lam=0.9))
    got = {tuple(p.path): p.score for p in paths}
    assert got == pytest.approx({(0, 2): 0.183333, (0, 1, 4): 0.527778, (0, 1, 5): 0.394444}, abs=1e-6)
    chosen, rejected = select_pair(paths, PairConfig())
    assert chosen.path == [0, 2] and rejected.path == [0, 1, 4]
    assert chosen.reward == pytest.approx(1 - 0.183333, abs=1e-6)


def test_value_mode_by_hand():
    """R = .9 clip + .1 * 100 exp(lm): R1 = 27 + 3.67879, R2 = 45 + 1.35335, R4 = 18 + 3.67879,
    R5 = 36 + 1.35335. Sums: [0,2] 46.35335, [0,1,4] 52.35759, [0,1,5] 68.03215 -> chosen [0,1,5]."""
    paths = path_rewards(hand_tree(), SCORES, RewardConfig(mode="value", lam=0.9))
    got = {tuple(p.path): p.score for p in paths}
    assert got == pytest.approx({(0, 2): 46.35335, (0, 1, 4): 52.35759, (0, 1, 5): 68.03215}, abs=1e-4)
    chosen, rejected = select_pair(paths, PairConfig())
    assert chosen.path == [0, 1, 5] and rejected.path == [0, 2]


def test_path_score_is_monotone_in_costs():
    rng = random.Random(1)
    for _ in range(200):
        costs = [rng.random() for _ in range(rng.randint(1, 6))]
        i = rng.randrange(len(costs))
        bumped = costs[:i] + [costs[i] + rng.random() + 1e-6] + costs[i + 1:]
        assert rank_path_score(bumped) > rank_path_score(costs)
    assert rank_path_score([0.5, 1.0]) == pytest.approx(0.5)


def test_chosen_differs_from_rejected_even_on_ties_and_guards():
    """Equal rewards: chosen is the first path, rejected the last (never one path twice)."""
    from training.csr.reward import PathReward

    paths = [PathReward(path=[0, i], sentences=[i], score=0.4, reward=0.6, response_ids=[i]) for i in (1, 2, 3)]
    chosen, rejected = select_pair(paths, PairConfig(**OURS))
    assert (chosen.path, rejected.path) == ([0, 1], [0, 3])
    assert select_pair(paths[:1], PairConfig(**OURS)) == "too_few_paths"
    assert select_pair(paths, PairConfig(**OURS, min_gap=0.01)) == "gap_below_min"
    paths[2].reward = 0.5
    assert select_pair(paths, PairConfig(**OURS, min_gap=0.05)) != "gap_below_min"


def test_end_node_closes_a_path_without_a_sentence():
    """A bare-EOS child ("end") makes its parent's response complete; it is neither ranked nor costed."""
    tree = hand_tree()
    end = _node(6, 1, 2, [2], final=True, status="end", text="", eos=True)
    end.prefix_ids = [11]
    tree.nodes.append(end)
    tree.nodes[1].children.append(6)
    paths = {tuple(p.path): p for p in path_rewards(tree, SCORES, RewardConfig())}
    assert paths[(0, 1, 6)].sentences == [1]
    assert paths[(0, 1, 6)].response_ids == [11]
    assert paths[(0, 1, 6)].score == pytest.approx(0.633333 / 2, abs=1e-6)


class _Tok:
    def decode(self, ids, skip_special_tokens=True):
        return " ".join(f"w{i}" for i in ids)


def test_build_pairs_records_and_stats():
    tree = hand_tree()
    other = hand_tree()
    other.id = "single"
    other.nodes[0].children = [2]  # only one complete path left -> skipped
    for n in other.nodes[1:]:
        if n.id != 2:
            n.status = "dropped:too_short"
    scores = [{"id": "t", "nodes": {str(k): v for k, v in SCORES.items()}},
              {"id": "single", "nodes": {"2": SCORES[2]}}]
    pairs, skipped = build_pairs([tree, other], scores, _Tok(), RewardConfig(), PairConfig(**OURS))
    assert skipped == Counter({"too_few_paths": 1})
    (p,) = pairs
    assert (p.chosen, p.rejected) == ("w12", "w11 w14")
    rec = llava_record(p)
    assert rec["conversations"][0] == {"from": "human", "value": "<image>\nDescribe."}
    assert rec["conversations"][1]["value"] == "w12" and rec["rejected_conversations"][1]["value"] == "w11 w14"
    p.chosen_relevance, p.rejected_relevance = 30.0, 20.0
    res = pair_stats(pairs, skipped, RewardConfig())
    m = {x.metric: x.value for x in res.metrics}
    assert m["reward_gap"] == pytest.approx((1 - 0.183333) - (1 - 0.527778), abs=1e-6)
    assert (m["num_pairs"], m["num_skipped"], m["chosen_relevance_mean"]) == (1.0, 1.0, 30.0)
    assert res.task == "csr_pairs" and res.samples[0]["chosen"] == "w12"


def test_pair_stats_of_no_pairs_is_nan_not_an_error():
    res = pair_stats([], Counter({"too_few_paths": 3}), RewardConfig())
    m = {x.metric: x.value for x in res.metrics}
    assert math.isnan(m["chosen_reward_mean"]) and m["num_skipped"] == 3.0


# ---------------------------------------------------------------- on the tiny model
@pytest.fixture(scope="module")
def image_root(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("csr_reward_images")
    for i in range(3):
        Image.new("RGB", (32, 32), (70 * i, 30, 200 - 50 * i)).save(root / f"{i}.png")
    return root


@pytest.mark.parametrize("groups,penalty", [(1, 0.0), (5, 0.05)])
def test_teacher_forced_lm_score_is_free_of_the_diversity_penalty(vlm, image_root, groups, penalty):
    """Without a penalty the beam's sentence score (mean log-prob, length penalty 1) equals the
    teacher-forced mean log-prob of the same ids. With a penalty, a group that still picks a token an
    earlier group chose carries the deduction in its beam score (a small penalty, 0.05, makes that
    common on the near-uniform random model; at 3.0 such tokens are simply avoided), so some beam
    scores are lower than the clean score and none is higher."""
    import torch

    from evalsuite.models.vlm import load_image
    from training.csr.config import TreeConfig
    from training.csr.generate import TreeGenerator
    from training.csr.reward import language_scores, scorable

    recs = [{"id": str(i), "image": f"{i}.png", "question": "Describe the image."} for i in range(3)]
    cfg = TreeConfig(num_beams=5, num_beam_groups=groups, diversity_penalty=penalty, max_new_tokens=8, max_depth=2)
    trees = TreeGenerator(vlm, cfg, image_root).generate(recs, progress=False)
    px = [vlm.processor.image_processor(images=[load_image(image_root / f"{i}.png")], return_tensors="pt")["pixel_values"]
          for i in range(3)]
    lm = language_scores(vlm, trees, px, batch=7)
    beam = [t.nodes[n].sentence_score for t in trees for n in scorable(t)]
    clean = [lm[i][n] for i, t in enumerate(trees) for n in scorable(t)]
    assert len(clean) > 10
    if penalty == 0:
        assert clean == pytest.approx(beam, abs=1e-4)
    else:
        diffs = torch.tensor(clean) - torch.tensor(beam)
        assert (diffs > -1e-4).all() and (diffs > 1e-3).any()
