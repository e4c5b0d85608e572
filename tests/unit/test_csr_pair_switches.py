"""What the released CSR chain's DPO sees, as `pairs.template / post_eos / guards` (docs/csr-fidelity.md).

Released (inference_csr/construct.py, train_csr/train_dpo_lora.py): every complete path is ranked by
sum(cost) / len(path with root) ascending (a stable sort over the DFS order), chosen = first, rejected =
last, no guard and no de-duplication; the human turn is the templated root prompt, which the DPO's
preprocess_multimodal turns into "<image>\\n" + value.replace("<image>", "").strip() and LLaVA's v1
conversation wraps again: SYSTEM + " USER: " + that + " ASSISTANT: " + response + "</s>"; the response is
the decoded leaf (special tokens skipped: an EOS vanishes, what followed it stays). The expected values
below are worked out by hand from those rules."""
from __future__ import annotations

import pytest

from training.csr.config import PairConfig, RewardConfig
from training.csr.generate import Node, Tree
from training.csr.pairs import build_pairs, llava_record, select_pair
from training.csr.reward import path_rewards
from training.csr.search import Hyp

VICUNA = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
          "helpful, detailed, and polite answers to the user's questions.")
OURS = {"template": "single", "post_eos": "cut", "guards": True}


def _leaf(i, ids):
    return Node(id=i, parent=0, depth=1, prefix_ids=[], sentence_ids=ids, text=f"s{i}", sentence_score=0.0,
                lm_score=0.0, is_final=True, status="final")


def _dup_tree() -> Tree:
    """root -> 1 "a red cup ." , 2 the same ids, 3 "a blue cup ." (all final)."""
    root = Node(id=0, parent=None, depth=0, prefix_ids=[], sentence_ids=[], text="", sentence_score=0.0,
                lm_score=0.0, status="expanded", children=[1, 2, 3])
    return Tree(id="t", image="x.png", question="Describe.", prompt_ids=[1],
                nodes=[root, _leaf(1, [5, 6, 7]), _leaf(2, [5, 6, 7]), _leaf(3, [5, 8, 7])])


# lm (beam score) -1, -3, -2; the duplicates' CLIP cosine is equal (same text), 3 is the most relevant.
SCORES = {1: {"lm": -1.0, "cos": 0.5, "clip": 50.0}, 2: {"lm": -3.0, "cos": 0.5, "clip": 50.0},
          3: {"lm": -2.0, "cos": 0.9, "clip": 90.0}}


def test_released_ranks_every_path_duplicates_included():
    """calculate_ranks: by lm 1, 3, 2 -> 1/3, 1, 2/3; by clip (stable on the tie) 3, 1, 2 -> 2/3, 1, 1/3.
    cost = .1 rank_lm + .9 rank_clip: 1: .1/3 + .6 = .63333, 2: .1 + .9 = 1.0, 3: .06667 + .3 = .36667;
    over len([root, leaf]) = 2: .31667, .5, .18333. Released: chosen [0, 3], rejected the duplicate [0, 2]
    (reward 1 - .5). Guards (ours): the duplicate path goes, so rejected is [0, 1] (reward 1 - .31667)."""
    released = select_pair(path_rewards(_dup_tree(), SCORES, RewardConfig(), distinct=False), PairConfig())
    assert [p.path for p in released] == [[0, 3], [0, 2]]
    assert released[1].reward == pytest.approx(0.5)
    ours = select_pair(path_rewards(_dup_tree(), SCORES, RewardConfig()), PairConfig(**OURS))
    assert [p.path for p in ours] == [[0, 3], [0, 1]]
    assert ours[1].reward == pytest.approx(1 - 0.316667, abs=1e-6)


def test_released_one_path_is_both_sides_and_no_path_is_skipped():
    """construct.py: sorted_results[0] and [-1] of one path are that path (it crashes on none; ours skips)."""
    tree = _dup_tree()
    tree.nodes[0].children = [3]
    for n in (1, 2):
        tree.nodes[n].status = "dropped:too_short"
    paths = path_rewards(tree, {3: SCORES[3]}, RewardConfig(), distinct=False)
    chosen, rejected = select_pair(paths, PairConfig())
    assert chosen is rejected and chosen.path == [0, 3]
    assert select_pair([], PairConfig()) == "no_paths"
    assert select_pair(paths, PairConfig(**OURS)) == "too_few_paths"


class _Tok:
    def decode(self, ids, skip_special_tokens=True):
        return " ".join(f"w{i}" for i in ids)


def test_released_pair_file_and_same_text_kept():
    """The duplicate pair of the first test: chosen "w5 w8 w7", rejected "w5 w6 w7". With 2 the most
    relevant (cos .95): clip ranks 2, 3, 1 -> costs 1: .1/3 + .9 = .93333, 2: .1 + .3 = .4, 3: .06667 + .6
    = .66667, so the released chosen (2) and rejected (1) are the same response, kept as a pair."""
    scores = [{"id": "t", "nodes": {str(k): v for k, v in SCORES.items()}}]
    prompt = "SYS USER: <image>\nDescribe. ASSISTANT:"
    (p,), skipped = build_pairs([_dup_tree()], scores, _Tok(), RewardConfig(), PairConfig(), [prompt + " "])
    assert (p.chosen, p.rejected, p.num_paths, sum(skipped.values())) == ("w5 w8 w7", "w5 w6 w7", 3, 0)
    rec = llava_record(p)
    assert rec["template"] == "released" and rec["conversations"][0] == {"from": "human", "value": prompt}
    same = {1: SCORES[1], 2: {**SCORES[2], "cos": 0.95}, 3: SCORES[3]}  # rejected = 1, chosen = 2: equal ids
    scores = [{"id": "t", "nodes": {str(k): v for k, v in same.items()}}]
    (p,), _ = build_pairs([_dup_tree()], scores, _Tok(), RewardConfig(), PairConfig(), [prompt])
    assert p.chosen == p.rejected == "w5 w6 w7"
    # ours: the duplicate path 2 goes (path 1 gave that response first), chosen 3 (.33333), rejected 1 (.46667)
    pairs, _ = build_pairs([_dup_tree()], scores, _Tok(), RewardConfig(), PairConfig(**OURS))
    assert [(p.chosen, p.rejected) for p in pairs] == [("w5 w8 w7", "w5 w6 w7")]
    with pytest.raises(ValueError, match="generation prompt"):
        build_pairs([_dup_tree()], scores, _Tok(), RewardConfig(), PairConfig())


def test_post_eos_text_kept_as_released(vlm, tmp_path):
    """"a red cup </s> on the left ." (the released rule runs past EOS to the "."): the released leaf text,
    decoded with special tokens skipped, is "a red cup on the left."; `post_eos: cut` gives "a red cup"."""
    from PIL import Image

    from tests.unit.test_csr_fidelity import grow, ids

    Image.new("RGB", (32, 32), (90, 30, 200)).save(tmp_path / "0.png")
    eos = vlm.tokenizer.eos_token_id
    first = tuple(ids(vlm, "a red cup")) + (eos,) + tuple(ids(vlm, "on the left ."))
    other = tuple(ids(vlm, "a blue cup ."))
    tree = grow(vlm, tmp_path, lambda node: [Hyp(first, -1.0, 0), Hyp(other, -2.0, 1)] if node.depth == 0
                else [Hyp(tuple(ids(vlm, "the cup is red .")) + (eos,), -1.0, 0)], max_depth=2)
    scores = [{"id": "p", "nodes": {"1": {"lm": -1.0, "cos": 0.9, "clip": 90.0}, "2": {"lm": -2.0, "cos": 0.1, "clip": 10.0},
                                    "3": {"lm": -1.0, "cos": 0.5, "clip": 50.0}}}]
    prompts = ["USER: <image>\nDescribe the image. ASSISTANT:"]
    (p,), _ = build_pairs([tree], scores, vlm.tokenizer, RewardConfig(), PairConfig(), prompts)
    assert p.chosen == "a red cup on the left."
    (p,), _ = build_pairs([tree], scores, vlm.tokenizer, RewardConfig(), PairConfig(**OURS))
    assert p.chosen == "a red cup"


def test_released_template_is_what_llava_v1_trains(tiny_vlm_dir):
    """The pair file's templated human turn through the `csr_pairs` reader and the DPO prompt path equals
    LLaVA's v1 rendering of construct.py's record: the system prompt twice, "ASSISTANT: ASSISTANT:"."""
    from transformers import AutoProcessor

    from evalsuite.errors import UserError
    from evalsuite.models.inputs import InputConfig, ModelInputs
    from training.data.formats import csr_pairs

    root = VICUNA + " USER: <image>\nDescribe the image. ASSISTANT:"
    rec = {"id": "1", "image": "x.png", "template": "released",
           "conversations": [{"from": "human", "value": root}, {"from": "gpt", "value": "a red cup."}],
           "rejected_conversations": [{"from": "human", "value": root}, {"from": "gpt", "value": "a cat."}]}
    (ex,) = csr_pairs(rec, "pairs.json:1")
    # preprocess_multimodal: "<image>\n" + value without "<image>", stripped; v1: SYS USER: {value} ASSISTANT: {a}</s>
    value = "<image>\n" + root.replace("<image>", "").strip()
    v1 = VICUNA + " USER: " + value + " ASSISTANT: " + "a red cup." + "</s>"
    assert v1 == (VICUNA + " USER: <image>\n" + VICUNA + " USER: \nDescribe the image. ASSISTANT: ASSISTANT: a red cup.</s>")
    processor = AutoProcessor.from_pretrained(tiny_vlm_dir, local_files_only=True)
    prompt, completion = ModelInputs(processor, InputConfig(system_prompt=VICUNA)).completion(ex["prompt"], ex["chosen"])
    assert prompt + completion + "</s>" == v1
    rec.pop("template")
    with pytest.raises(UserError, match="templated prompt"):
        csr_pairs(rec, "pairs.json:1")


def test_csr_preset_and_defaults_are_released(repo_root):
    assert (PairConfig().template, PairConfig().post_eos, PairConfig().guards, PairConfig().tie_order) == \
        ("released", "keep", False, "released")
    from evalsuite.config import unread_fields  # refused / warned about where loaded (tests/unit/test_unread.py)

    assert ("min_gap", "guards", False, True) in unread_fields(PairConfig(min_gap=0.1))
    import yaml

    pairs = yaml.safe_load((repo_root / "configs" / "csr.yaml").read_text())["pairs"]
    assert pairs == {"template": "released", "post_eos": "keep", "guards": False, "tie_order": "released"}


def test_no_pairs_message_names_only_settings_that_apply():
    """pairs.min_paths / min_gap are read only with guards: true (else set, they are an error or a warning),
    so the no-pairs line names them only then."""
    from collections import Counter

    from training.csr.pairs import no_pairs_message

    released = no_pairs_message(1, [], [], Counter(no_paths=2), RewardConfig(), guards=False)
    ours = no_pairs_message(1, [], [], Counter(too_few_paths=2), RewardConfig(), guards=True)
    assert "min_paths" not in released and "no_paths=2" in released and "tree.max_new_tokens" in released
    assert "pairs.min_paths / pairs.min_gap" in ours
