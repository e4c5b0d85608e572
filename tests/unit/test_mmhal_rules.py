"""MMHal's parse and score rules: hand-worked values, and equality with the released summaries' printed
outputs on the same replies (tests/data/mmhal/README.md: the scripts, run unmodified, and how to regenerate)."""
from __future__ import annotations

import json
import re

import pytest

from evalsuite.tasks.mmhal import informativeness, parse_rating, render_judge_prompt, summarize

REF = "tests/data/mmhal"


@pytest.mark.parametrize("reply,expected", [
    ("Short explanation.\nRating: 5", (5, True)),
    ("rating: 0", (0, True)),
    ("RATING: 6 because ...", (6, True)),
    ("Rating: 3. Again, Rating: 3.", (3, True)),          # one N found (twice): parsed
    ("Rating: 2 ... Rating: 5", (0, False)),              # two N: 0, unparsable
    ("No score here.", (0, False)),
    ("", (0, False)),
    ("Rating:4", (0, False)),                              # no space
    ("Rating:  4", (0, False)),                            # two spaces
    ("Rating: 10", (1, True)),                             # the released substring rule reads "rating: 1"
    ("Rating: 4.5", (4, True)),
    ("Rating: 5/6", (5, True)),
    ("rating: 7", (0, False)),
])
def test_parse_rating(reply, expected):
    assert parse_rating(reply) == expected


def test_informativeness_grades():
    assert [informativeness(r) for r in range(7)] == [0, 1, 2, 0, 1, 2, 3]


def test_summary_hand_worked():
    # ratings 6, 2, 0 (unparsable), 4 over types a, a, b, b
    samples = [{"key": str(i), "rating": r, "parsed": p, "question_type": t}
               for i, (r, p, t) in enumerate([(6, True, "a"), (2, True, "a"), (0, False, "b"), (4, True, "b")])]
    got = summarize(samples)
    assert got["score"] == pytest.approx(3.0)                       # (6 + 2 + 0 + 4) / 4
    assert got["hallucination_rate"] == pytest.approx(0.5)          # 2 and 0 are < 3
    assert got["informativeness"] == pytest.approx((3 + 2 + 0 + 1) / 4 / 3)
    assert got["score/a"] == pytest.approx(4.0) and got["score/b"] == pytest.approx(2.0)
    assert got["unparsable_rate"] == pytest.approx(0.25) and got["unparsable"] == 1


def _released_types(repo_root) -> list[str]:
    subset = json.loads((repo_root / REF / "template_subset.json").read_text())
    return [subset[i % 8]["question_type"] for i in range(96)]   # the released file's order (README)


def _blocks(text: str) -> dict[str, str]:
    """RLAIF-V's output split per input file."""
    parts = re.split(r"^===> .*?([a-z]+)\.mmhal_test_eval\.json$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def _printed(block: str) -> dict:
    out = {"unparsable": [int(m) for m in re.findall(r"^Warning: multiple or zero scores found\n(\d+) ", block, re.M)]}
    for key, pat in (("informativeness", r"^Informativeness: ([\d.]+)$"), ("score", r"^Average score: ([\d.]+)$"),
                     ("hallucination_rate", r"^Hallucination rate: ([\d.]+)$"),
                     ("per_type", r"^Average score for each question type: (.*)$")):
        m = re.search(pat, block, re.M)
        if m:
            out[key] = m.group(1)
    return out


def _ours(repo_root, name: str) -> tuple[list[dict], dict]:
    replies = json.loads((repo_root / REF / "reference" / "replies" / f"{name}.mmhal_test_eval.json").read_text())
    samples = []
    for i, (reply, qtype) in enumerate(zip(replies, _released_types(repo_root))):
        rating, parsed = parse_rating(reply["choices"][0]["message"]["content"])
        samples.append({"key": str(i), "rating": rating, "parsed": parsed, "question_type": qtype})
    return samples, summarize(samples)


@pytest.mark.parametrize("name", ["mixed", "clean"])
def test_equals_released_rlaif_v_summary(repo_root, name):
    block = _blocks((repo_root / REF / "reference" / "rlaif_v_summarize_gpt_mmhal_review.out").read_text())[name]
    ref = _printed(block)
    samples, ours = _ours(repo_root, name)
    # it parses every file twice (informativeness, then the score), warning each time
    assert [i for i, s in enumerate(samples) if not s["parsed"]] * 2 == ref["unparsable"]
    assert ours["unparsable"] == len(ref["unparsable"]) // 2
    assert f"{ours['informativeness'] * 100:.2f}" == ref["informativeness"]
    assert f"{ours['score']:.2f}" == ref["score"]
    assert f"{ours['hallucination_rate']:.2f}" == ref["hallucination_rate"]
    types = list(dict.fromkeys(_released_types(repo_root)))
    assert ",".join(str(round(ours[f"score/{t}"], 2)) for t in types) == ref["per_type"]
    if name == "mixed":   # the malformed set exercises the rule: unparsable replies exist, fewer than half
        assert 0 < ours["unparsable"] < 48


@pytest.mark.parametrize("name", ["mixed", "clean"])
def test_equals_released_llava_rlhf_summary(repo_root, name):
    ref = _printed((repo_root / REF / "reference" / f"llava_rlhf_summarize_gpt_mmhal.{name}.out").read_text())
    samples, ours = _ours(repo_root, name)
    assert [i for i, s in enumerate(samples) if not s["parsed"]] == ref["unparsable"]
    assert f"{ours['score']:.2f}" == ref["score"] and f"{ours['hallucination_rate']:.2f}" == ref["hallucination_rate"]
    types = list(dict.fromkeys(_released_types(repo_root)))
    assert ",".join(str(round(ours[f"score/{t}"], 2)) for t in types) == ref["per_type"]


def test_judge_prompt_equals_released_rendering(repo_root):
    records = json.loads((repo_root / REF / "template_subset.json").read_text())
    ref = json.loads((repo_root / REF / "reference" / "prompts.json").read_text())
    assert len(ref) == 8
    for r in ref:
        assert render_judge_prompt(records[r["index"]], r["answer"]) == r["prompt"]
