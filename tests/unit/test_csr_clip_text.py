"""What CLIP scores for a CSR sentence (`reward.clip_text`, docs/csr-fidelity.md).

Released (inference_csr/score.py + utils.py): a node's text is its whole decoded sequence (the root's is the
prompt string); the sentence CLIP sees is that text past len(parent's text) + 3 characters, stripped, then
whitelisted (word characters, whitespace and `!"#$%&'()*+,./:;<=>?[]^{}€£°™©®♫♪π√`: the class spans
'"'..'(' so "-" is dropped). Every expected string below is worked out by hand from those rules."""
from __future__ import annotations

import pytest

from training.csr.config import RewardConfig
from training.csr.clean import released_new_text, released_whitelist
from training.csr.reward import clip_texts, score_trees
from training.csr.search import Hyp

SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
          "detailed, and polite answers to the user's questions.")
ROOT = SYSTEM + " USER: <image>\nDescribe this image. ASSISTANT:"


def test_whitelist_by_hand():
    assert released_whitelist("well-known café ☕ 50% off #1 & more @home ~x `q` |p| back\\slash ™ π≈3 → ok_1") == \
        "wellknown café  50% off #1 & more home x q p backslash ™ π3  ok_1"
    assert released_whitelist('a "b" (c) [d] {e} <f> = g + h * i / j ^ k; l: m? n! €1 £2 3° © ® ♫ ♪ √4') == \
        'a "b" (c) [d] {e} <f> = g + h * i / j ^ k; l: m? n! €1 £2 3° © ® ♫ ♪ √4'
    assert released_whitelist("“quoted” — naïve\ttab\nline") == "quoted  naïve\ttab\nline"


def test_released_cut_by_hand():
    # Depth 1, decode identical to the prompt string: the cut eats the sentence's leading space and "Th".
    child = ROOT + " The dog-like cat sits on a mat."
    assert released_new_text(child, ROOT) == "e doglike cat sits on a mat."
    # Depth 1 when the decoder puts two spaces around <image> ("USER:  <image> \n"): the +3 lands on "The".
    drift = ROOT.replace("USER: <image>\n", "USER:  <image> \n") + " The cat sits."
    assert released_new_text(drift, ROOT) == "The cat sits."
    # Depth 2: the parent's text is a prefix of the child's; "It" loses "I", "t" and the space before "is".
    grand = child + " It is black & white, 100% cute ☺."
    assert released_new_text(grand, child) == "is black & white, 100% cute ."
    # " Ok." loses " Ok": "." is left, under 4 characters (the released scorer then skips the node).
    assert released_new_text(child + " Ok.", child) == "."


@pytest.fixture(scope="module")
def image_root(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("clip_text_images")
    Image.new("RGB", (32, 32), (90, 30, 200)).save(root / "0.png")
    return root


def _tree(vlm, image_root):
    from tests.unit.test_csr_fidelity import grow, ids

    eos = vlm.tokenizer.eos_token_id

    def script(node):
        if node.depth == 0:
            return [Hyp(tuple(ids(vlm, "a red cup is on the left .")), -1.0, 0), Hyp(tuple(ids(vlm, "a blue cup .")), -2.0, 1)]
        return [Hyp(tuple(ids(vlm, "the cup is red")) + (eos,) + tuple(ids(vlm, "on the left .")), -1.0, 0)]

    return grow(vlm, image_root, script, max_depth=3)


def test_released_texts_on_the_tiny_tree(vlm, image_root):
    """Tiny prompt string "USER: <image>\\nDescribe the image. ASSISTANT:" (44 characters); the tiny word
    tokenizer decodes the prompt ids (image run kept once) as "user : <image> describe the image.
    assistant :" (46). Depth 1: "<that> a red cup is on the left." cut at 44 + 3 = 47 = the sentence
    itself. Depth 2: the parent's decoded text (72 characters) + " the cup is red on the left." (EOS
    dropped, what followed it kept) cut at 75: "e cup is red on the left.". Ours: the decoded sentence."""
    tree = _tree(vlm, image_root)
    assert [n.text for n in tree.nodes[1:]] == ["a red cup is on the left.", "a blue cup.",
                                                 "the cup is red on the left.", "the cup is red on the left."]
    assert clip_texts(vlm, tree, [1, 2, 3, 4], "released") == [
        "a red cup is on the left.", "a blue cup.", "e cup is red on the left.", "e cup is red on the left."]
    assert clip_texts(vlm, tree, [1, 2, 3, 4], "sentence") == [n.text for n in tree.nodes[1:]]


class _Recorder:
    def __init__(self):
        self.texts = []

    def score_texts(self, items):
        self.texts += [t for _, t in items]
        return [50.0] * len(items), [0.5] * len(items)


def test_score_trees_scores_the_released_text_by_default(vlm, image_root):
    assert RewardConfig().clip_text == "released"
    tree = _tree(vlm, image_root)
    rec = _Recorder()
    score_trees(vlm, rec, [tree], image_root, RewardConfig())
    assert rec.texts[2:] == ["e cup is red on the left."] * 2
    rec = _Recorder()
    score_trees(vlm, rec, [tree], image_root, RewardConfig(clip_text="sentence"))
    assert rec.texts[2:] == ["the cup is red on the left."] * 2


def test_released_texts_where_the_processor_holds_an_added_token(vlm, image_root, monkeypatch):
    """BLIP-2 / InstructBLIP processors hold the image token as a tokenizers `AddedToken`, not a str: the
    released texts read it as a string (as the tree generator does), the same texts as with the str."""
    from tokenizers import AddedToken

    tree = _tree(vlm, image_root)
    expected = clip_texts(vlm, tree, [1, 2, 3, 4], "released")
    token = vlm.inputs.image_token
    monkeypatch.setattr(vlm.processor, "image_token", AddedToken(token, normalized=False, special=True))
    assert clip_texts(vlm, tree, [1, 2, 3, 4], "released") == expected
