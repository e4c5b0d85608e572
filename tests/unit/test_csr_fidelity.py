"""The released CSR sampler's rules as the defaults of TreeConfig / RewardConfig (docs/csr-fidelity.md),
and our switches. The search is scripted (fixed candidate sentences per node) on the tiny checkpoint's
real tokenizer and processor, so sentence ends, final branches, duplicates and the junk filter's place
are checked against hand-worked trees; the stop ids come from a real TreeGenerator."""
from __future__ import annotations

import pytest

from evalsuite.errors import UserError
from training.csr.config import RewardConfig, TreeConfig
from training.csr.generate import Node, Tree, TreeGenerator
from training.csr.search import Hyp


@pytest.fixture(scope="module")
def image_root(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("fidelity_images")
    Image.new("RGB", (32, 32), (90, 30, 200)).save(root / "0.png")
    return root


def ids(vlm, text):
    out = vlm.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert vlm.tokenizer.unk_token_id not in out, text
    return out


def grow(vlm, image_root, script, **cfg):
    """The tree of one prompt whose search returns `script(node)` (best first): the expander injected into the
    reference engine (`engines.make_tree_engine(..., expand=)`)."""
    from training.csr.engines import make_tree_engine

    rec = [{"id": "p", "image": "0.png", "question": "Describe the image."}]
    engine = make_tree_engine(TreeConfig(**cfg), vlm, image_root,
                              expand=lambda chunk: [script(p.tree.nodes[nid]) for p, nid in chunk])
    return engine.grow(rec, progress=False)[0]


def test_stop_ids_released_and_ours(vlm, image_root):
    """Released: only the "." token ends a sentence (tiny vocab: id 7; LLaMA's 29889), EOS does not.
    Ours (`sentence_marks`): every token decoding to . ! ? and EOS."""
    tok = vlm.tokenizer
    released = TreeGenerator(vlm, TreeConfig(), image_root).spec.stop_ids
    assert released == (tok.convert_tokens_to_ids("."),) == (7,)
    ours = TreeGenerator(vlm, TreeConfig(stop="sentence_marks"), image_root).spec.stop_ids
    assert tok.eos_token_id in ours and {tok.decode([i]) for i in ours if i != tok.eos_token_id} == {".", "!", "?"}
    assert TreeGenerator(vlm, TreeConfig(period_id=9), image_root).spec.stop_ids == (9,)
    with pytest.raises(UserError, match="tree.period_id"):
        TreeGenerator(vlm, TreeConfig(period_id=10**6), image_root)


def test_released_eos_mid_sentence_ends_the_branch_and_is_cut_from_the_response(vlm, image_root):
    """"a red cup </s> on the left ." is one candidate (the search ran past EOS to the "."): the child is
    final, its text keeps what follows EOS (as the released tree's decoded text does), and its response
    stops before EOS. A candidate of EOS only is not an "end" node under the released rule: its empty
    text is too short, so it is dropped with the junk."""
    eos = vlm.tokenizer.eos_token_id
    first = ids(vlm, "a red cup") + [eos] + ids(vlm, "on the left .")
    script = lambda node: [Hyp(tuple(first), -1.0, 0), Hyp((eos, eos), -2.0, 1)]  # noqa: E731
    tree = grow(vlm, image_root, script)
    a, b = tree.nodes[1], tree.nodes[2]
    assert (a.is_final, a.status, a.eos_at, a.text) == (True, "final", 3, "a red cup on the left.")
    assert a.response_ids == ids(vlm, "a red cup")
    assert b.status == "dropped:too_short" and tree.complete_paths() == [[0, 1]]
    ours = grow(vlm, image_root, script, stop="sentence_marks", max_depth=3)
    assert ours.nodes[2].status == "end"


def test_char_cap_counts_prompt_response_and_beam_padding(vlm, image_root):
    """sample.py: final when len(decode(prompt + response, special tokens kept)) >= max_length (1024), the
    prompt holding one image placeholder, and HF's beam search padding the shorter candidates of a call
    with pad tokens up to the longest. Tiny prompt: "user : <image> describe the image. assistant :"
    (46 characters). Candidates A = "a red cup ." (4 tokens) and B = "a red cup is on the left ." (8 tokens):
    A is decoded with 4 pads: "... assistant : a red cup. <pad> <pad> <pad> <pad>" = 81 characters;
    B: "... assistant : a red cup is on the left." = 72. So max_chars 81 ends A (not B), 82 neither."""
    a, b = ids(vlm, "a red cup ."), ids(vlm, "a red cup is on the left .")
    tail = [[Hyp(tuple(ids(vlm, "the cup is red .")), -1.0, 0)]]

    def script(node):
        return [Hyp(tuple(a), -1.0, 0), Hyp(tuple(b), -2.0, 1)] if node.depth == 0 else tail[0]

    tree = grow(vlm, image_root, script, max_chars=81, max_depth=2)
    assert [n.status for n in tree.nodes[1:3]] == ["final", "expanded"]
    tree = grow(vlm, image_root, script, max_chars=82, max_depth=2)
    assert [n.status for n in tree.nodes[1:3]] == ["expanded", "expanded"]
    assert tree.nodes[3].status == "final"  # the depth cap, when given, still ends a branch


def test_duplicate_siblings_kept_unless_deduped(vlm, image_root):
    """Released: always num_beams children, duplicates included (the sibling count n enters every rank)."""
    a, b = tuple(ids(vlm, "a red cup .")), tuple(ids(vlm, "a blue cup ."))
    eos = vlm.tokenizer.eos_token_id
    script = lambda node: [Hyp(a + (eos,), -1.0, 0), Hyp(a + (eos,), -1.5, 1), Hyp(b + (eos,), -2.0, 2)]  # noqa: E731
    assert len(grow(vlm, image_root, script).nodes[0].children) == 3
    assert len(grow(vlm, image_root, script, dedupe_siblings=True).nodes[0].children) == 2


def test_junk_filter_after_pruning_holds_a_slot(vlm, image_root):
    """Root children 1..5 with beam scores -1..-5; 5 is junk ("a a a a a a cup ." repeats a word 6 times).
    Released (after pruning): pruning keeps the best (1) and the two worst (4, 5), so junk 5 takes a slot
    and is expanded, 2 and 3 are pruned; afterwards 5 and its child are dropped. Ours (before pruning):
    5 is dropped at once, 4 live children < the threshold 5, so 1-4 are all expanded."""
    eos = vlm.tokenizer.eos_token_id
    words = ["a red cup .", "a blue cup .", "a green cup .", "a pink cup .", "a a a a a a cup ."]

    def script(node):
        if node.depth == 0:
            return [Hyp(tuple(ids(vlm, w)), -1.0 - i, i) for i, w in enumerate(words)]
        return [Hyp(tuple(ids(vlm, "the cup is red .")) + (eos,), -1.0, 0)]

    tree = grow(vlm, image_root, script)
    assert [tree.nodes[c].status for c in range(1, 6)] == ["expanded", "pruned", "pruned", "expanded", "dropped:word_repeat"]
    junk_child = tree.nodes[5].children[0]
    assert tree.nodes[junk_child].status == "dropped:ancestor"
    assert len(tree.complete_paths()) == 2
    ours = grow(vlm, image_root, script, junk_filter="before_pruning")
    assert [ours.nodes[c].status for c in range(1, 6)] == ["expanded"] * 4 + ["dropped:word_repeat"]
    assert len(ours.complete_paths()) == 4


class _Clip:
    def score_texts(self, items):
        return [50.0] * len(items), [0.5] * len(items)


def _two_leaves() -> Tree:
    """root -> 1 (beam score -1), 2 (beam score -2), both final."""
    def node(i, score):
        return Node(id=i, parent=0, depth=1, prefix_ids=[], sentence_ids=[5, 7 + i], text=f"sentence {i}",
                    sentence_score=score, lm_score=score, is_final=True, status="final")

    root = Node(id=0, parent=None, depth=0, prefix_ids=[], sentence_ids=[], text="", sentence_score=0.0,
                lm_score=0.0, status="expanded", children=[1, 2])
    return Tree(id="t", image="0.png", question="Describe.", prompt_ids=[1], nodes=[root, node(1, -1.0), node(2, -2.0)])


def test_language_score_beam_is_the_search_score_without_a_second_pass(vlm, image_root, monkeypatch):
    """`beam` (released): lm = the node's beam score, no teacher-forced pass. With lam 0 (LM term only)
    chosen is node 1 (score -1 > -2). `teacher_forced`: the second pass's scores (here -3 and -0.5)
    reverse the ranks, so chosen is node 2."""
    from training.csr import reward
    from training.csr.config import PairConfig
    from training.csr.pairs import select_pair

    def no_pass(*a, **k):
        raise AssertionError("the teacher-forced pass ran")

    monkeypatch.setattr(reward, "language_scores", no_pass)
    tree = _two_leaves()
    (beam,) = reward.score_trees(vlm, _Clip(), [tree], image_root, RewardConfig())
    assert {k: v["lm"] for k, v in beam["nodes"].items()} == {1: -1.0, 2: -2.0}
    monkeypatch.setattr(reward, "language_scores", lambda *a, **k: [{1: -3.0, 2: -0.5}])
    (tf,) = reward.score_trees(vlm, _Clip(), [tree], image_root, RewardConfig(language_score="teacher_forced"))
    assert {k: v["lm"] for k, v in tf["nodes"].items()} == {1: -3.0, 2: -0.5}
    for scores, want in ((beam, [0, 1]), (tf, [0, 2])):
        chosen, _ = select_pair(reward.path_rewards(tree, scores["nodes"], RewardConfig(lam=0.0)), PairConfig())
        assert chosen.path == want


@pytest.mark.parametrize("data,field", [
    ({"stop": "eos"}, "tree.stop"),
    ({"junk_filter": "never"}, "tree.junk_filter"),
    ({"max_chars": None, "max_response_tokens": None, "max_depth": None}, "tree.max_chars"),
    ({"max_chars": 0}, "tree.max_chars"),
])
def test_tree_switches_are_validated(data, field):
    with pytest.raises(UserError, match=field.replace(".", r"\.")):
        TreeConfig(**data)
    with pytest.raises(UserError, match=r"reward\.language_score"):
        RewardConfig(language_score="clip")
