"""The junk rules (`tree.junk_rules`, training/csr/clean.py, docs/csr-fidelity.md).

`released` is checked against the released functions' own verdicts: tests/data/csr_clean/released.json
holds (parent text, child text) inputs and what YiyangZhou/CSR@353de42's `extract_new_text`,
`clean_tree` and score.py's length rule made of them (tests/data/csr_clean/make_reference.py ran
them). The rule each case breaks is worked out by hand below; `broad` is ours, kept for the demo."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.csr.clean import junk_reason, released_new_text

DATA = Path(__file__).resolve().parents[1] / "data" / "csr_clean" / "released.json"


def test_released_rules_agree_with_the_released_code():
    """Per case: the new text equals extract_new_text's; clean_tree drops the child exactly when a junk
    rule (anything but too_short) fires; the length rule drops exactly when too_short is what is left."""
    doc = json.loads(DATA.read_text())
    assert "353de42" in doc["source"] and len(doc["cases"]) >= 70
    junk = short = 0
    for case in doc["cases"]:
        new = released_new_text(case["child"], case["parent"])
        assert new == case["new_text"], case
        reason = junk_reason(new, 4, "released")
        assert (reason is None or reason == "too_short") == case["clean_tree_keeps"], (case, reason)
        assert (reason is None) == (case["clean_tree_keeps"] and case["long_enough"]), (case, reason)
        junk += not case["clean_tree_keeps"]
        short += reason == "too_short"
    assert junk >= 25 and short >= 4


@pytest.mark.parametrize("text,released,broad", [
    # the five sentences where ours differed (docs/csr-fidelity.md, "Junk rules")
    ("A radio plays music \u266a in the room.", None, "foreign_script"),    # ♪ is whitelisted, no rule
    ("The sign says Hi \U0001F600 there.", None, "foreign_script"),         # the whitelist deletes the emoji
    ("Dog, dog, dog, dog, dog, dog runs.", None, "word_repeat"),            # released: same case, spaces only
    ("Apples, pears, , , , and figs.", None, "degenerate_literal"),         # released: 13 commas (or 11 in a row)
    ("The sign reads &nbsp; &nbsp; here.", None, "nbsp"),                   # released: back to back only
    # where the whitelist changes the verdict
    ("A&nbsp;-&nbsp;B here.", "nbsp", None),                                # "-" deleted: back to back
    ("a-a-a-a-a-a-a-a-a-a-a here.", "char_repeat", "word_repeat"),          # "-" deleted: 11 a's in a row
    ("A line ----------- here.", None, "char_repeat"),                      # "-" deleted: nothing repeats
    ("Hi \U0001F600", "too_short", "foreign_script"),                        # "Hi " is 3 characters
    # the released word repeat: case-sensitive, whitespace only, the last repeat may be a prefix
    ("the the the the the then it.", "word_repeat", None),
    ("Dog dog dog dog dog dog runs.", None, "word_repeat"),
    ("cat\ncat\ncat\ncat\ncat\ncat here.", "word_repeat", "word_repeat"),
    # character repeats: any character but a newline, whitespace included
    ("A" + " " * 11 + "gap here.", "char_repeat", None),
    ("A" + " " * 10 + "gap here.", None, None),
    ("Wow!!!!!!!!!!! here.", "char_repeat", "char_repeat"),
    ("Wow!!!!!!!!!! here.", None, None),
    # scripts: the released ranges only
    ("An old \u1100\u1161 sign.", None, "foreign_script"),                   # Hangul Jamo
    ("He laughs \u314b\u314b here.", "foreign_script", "foreign_script"),    # compatibility jamo
    ("It reads \u042d\u0442\u043e here.", "foreign_script", "foreign_script"),
    ("A \u30cd\u30b3 cat.", "foreign_script", "foreign_script"),
    ("A rocket \U0001F680 flies.", None, "foreign_script"),
    # literals, newlines, length
    ("It is '''''''''' odd.", "degenerate_literal", "degenerate_literal"),  # 10 quotes: the literal, not a repeat
    ("a\nb\nc\nd\ne\nf\ng", "newlines", "newlines"),
    ("Ok.", "too_short", "too_short"),
    ("Yes.", None, None),
    ("A red circle is on the left.", None, None),
])
def test_rules_by_hand(text, released, broad):
    assert junk_reason(released_new_text(text, ""), 4, "released") == released
    assert junk_reason(text, 4, "broad") == broad


def test_released_reads_the_cut_text():
    """Below the root the released filters read the text past len(parent) + 3: " Yes." loses " Ye" and
    "s." is too short; six "dog"s after "It has" stay six, five after a leading cut "dog" do not repeat."""
    parent = "USER: <image>\nDescribe. ASSISTANT: The cat."
    assert released_new_text(parent + " Yes.", parent) == "s."
    assert junk_reason("s.", 4, "released") == "too_short"
    assert released_new_text(parent + " The cat sits.", parent) == "e cat sits."
    assert junk_reason(released_new_text(parent + " dog dog dog dog dog dog.", parent), 4, "released") is None
    with pytest.raises(ValueError, match="junk rules"):
        junk_reason("x", 4, "paper")


# ---------------------------------------------------------------- in the tree search
@pytest.fixture(scope="module")
def image_root(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("clean_images")
    Image.new("RGB", (32, 32), (90, 30, 200)).save(root / "0.png")
    return root


@pytest.mark.parametrize("junk_filter", ["after_pruning", "before_pruning"])
def test_tree_search_applies_the_released_rules_to_the_cut_text(vlm, image_root, junk_filter):
    """Depth 2 under "a red cup .": "a a a a a a cup ." loses "a " to the cut, so five a's are left (kept
    by the released rules, a word repeat for ours); "red ." leaves "d." (too short for the released
    rules, 4 characters for ours). Either place of the filter gives the same statuses here (no pruning)."""
    from tests.unit.test_csr_fidelity import grow, ids
    from training.csr.search import Hyp

    eos = vlm.tokenizer.eos_token_id

    def script(node):
        if node.depth == 0:
            return [Hyp(tuple(ids(vlm, "a red cup .")), -1.0, 0)]
        return [Hyp(tuple(ids(vlm, s)) + (eos,), -1.0 - i, i)
                for i, s in enumerate(["a a a a a a cup .", "red .", "the cup is red ."])]

    released = grow(vlm, image_root, script, junk_filter=junk_filter, max_depth=3)
    assert [n.status for n in released.nodes[2:]] == ["final", "dropped:too_short", "final"]
    ours = grow(vlm, image_root, script, junk_filter=junk_filter, junk_rules="broad", max_depth=3)
    assert [n.status for n in ours.nodes[2:]] == ["dropped:word_repeat", "final", "final"]


def test_junk_rules_default_released_and_checked():
    from evalsuite.errors import UserError
    from training.csr.config import TreeConfig

    assert TreeConfig().junk_rules == "released"
    with pytest.raises(UserError, match="tree.junk_rules"):
        TreeConfig(junk_rules="strict")
