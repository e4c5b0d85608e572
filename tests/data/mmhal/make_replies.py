"""Writes the judge replies the released MMHal summaries are run on (evalsuite's own construction; see README.md).

    python make_replies.py OUT_DIR      # -> OUT_DIR/{mixed,clean}.mmhal_test_eval.json (96 replies each)

`mixed` walks through every rating rule: clean ratings 0..6 with text around, lower/upper case, no rating,
two different ratings, the same rating twice, no space after the colon, two spaces, "Rating: 10", "4.5",
"5/6", the option list echoed, an empty reply. `clean` is 96 well-formed replies with seeded ratings.
"""
import json
import random
import sys
from pathlib import Path

OPTIONS = ("- Rating: 6, very informative with good analysis or reasoning, no hallucination\n"
           "- Rating: 5, very informative, no hallucination\n- Rating: 4, somewhat informative, no hallucination\n"
           "- Rating: 3, not informative, no hallucination\n- Rating: 2, very informative, with hallucination\n"
           "- Rating: 1, somewhat informative, with hallucination\n- Rating: 0, not informative, with hallucination")

MALFORMED = [
    "The response matches the image. Rating: {n}",
    "Explanation: the answer is grounded.\n\nrating: {n}",
    "RATING: {n}\nThe response is accurate.",
    "The response invents a second dog.",                          # no rating
    "First I thought Rating: 2, but on reflection Rating: 5.",      # two ratings
    "Rating: {n}. To repeat: Rating: {n}.",                         # the same rating twice
    "Rating:{n} (no space)",
    "Rating:  {n} (two spaces)",
    "Rating: 10 out of 10",
    "Rating: 4.5",
    "Rating: 5/6",
    OPTIONS,                                                        # the option list echoed
    "",                                                             # empty
    "Hallucination: No.\n- Rating: {n}, as above",
]


def completion(text: str) -> dict:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "model": "constructed"}


def mixed() -> list[str]:
    out = []
    for i in range(96):
        form = MALFORMED[i % len(MALFORMED)]
        out.append(form.format(n=(i * 5 + i // 14) % 7))
    return out


def clean() -> list[str]:
    rng = random.Random(39)
    return [f"Analysis: reply {i}.\nRating: {rng.randrange(7)}" for i in range(96)]


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, texts in (("mixed", mixed()), ("clean", clean())):
        (out / f"{name}.mmhal_test_eval.json").write_text(json.dumps([completion(t) for t in texts], indent=1))
