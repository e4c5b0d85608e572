"""Record converters, one per dataset format: a raw record -> zero or more training examples.

Pair examples:  {"image": str|None, "image_bytes": bytes|None, "prompt": str, "chosen": str, "rejected": str}
SFT examples:   {"image": str|None, "image_bytes": bytes|None, "messages": [{"role", "content"}, ...]}
`prompt` and user turns are bare questions: the `<image>` placeholder is stripped here and the
chat template puts the image back in one place. `image` is still relative to `--image_root`.
"""
from __future__ import annotations

import json
import re
from itertools import combinations
from typing import Any, Callable

from evalsuite.errors import UserError

IMAGE_TOKEN = "<image>"
USER_ROLES = {"user", "human"}
ASSISTANT_ROLES = {"assistant", "gpt"}


def _text(row: dict, key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: field {key!r} must be a non-empty string")
    return value


def _bare(question: str) -> str:
    return question.replace(IMAGE_TOKEN, "").strip()


def image_name(value: Any, where: str, key: str = "image") -> str:
    """An image field's value checked when the data is read: a non-empty string without NUL or other
    control characters (a path under the image root); anything else is one line naming the row and field."""
    if not isinstance(value, str):
        raise UserError(f"{where}: field {key!r} must be an image path string, got {type(value).__name__} "
                        f"{str(value)[:40]!r}")
    if not value.strip():
        raise UserError(f"{where}: field {key!r} is an empty string (null marks a text-only row)")
    bad = next((c for c in value if ord(c) < 32 or 127 <= ord(c) < 160), None)
    if bad is not None:
        raise UserError(f"{where}: field {key!r} holds a control character ({bad!r}); an image path cannot")
    return value


def _image(row: dict, where: str, key: str = "image") -> dict[str, Any]:
    """{"image", "image_bytes"} of a row: a path string, a parquet Image struct, or null / no field = a
    text-only row (counted in the data summary); an empty string, another type or a control character in
    the name is an error naming the row and field."""
    value = row.get(key)
    if value is None:
        return {"image": None, "image_bytes": None}
    if isinstance(value, dict) and (value.get("bytes") or value.get("path")):  # parquet Image feature
        if value.get("bytes"):
            if not isinstance(value["bytes"], (bytes, bytearray)):
                raise UserError(f"{where}: field {key!r}.bytes must be bytes, got {type(value['bytes']).__name__}")
            return {"image": None, "image_bytes": value["bytes"]}
        return {"image": image_name(value["path"], where, f"{key}.path"), "image_bytes": None}
    if isinstance(value, dict):
        if value.get("bytes") is None and value.get("path") is None:   # a null cell of an Image column
            return {"image": None, "image_bytes": None}
        raise UserError(f"{where}: field {key!r} must be a path string or an image struct with bytes or a path")
    return {"image": image_name(value, where, key), "image_bytes": None}


def plain_dpo(row: dict, where: str, **_) -> list[dict]:
    """{"image"?: "x.jpg", "prompt": "...", "chosen": "...", "rejected": "..."} -> one pair."""
    return [{**_image(row, where), "prompt": _bare(_text(row, "prompt", where)),
             "chosen": _text(row, "chosen", where), "rejected": _text(row, "rejected", where)}]


def _turns(conv: Any, where: str, key: str) -> list[dict[str, str]]:
    """LLaVA/VL-RLHF turns [{"from", "value"}] -> [{"role", "content"}], user/assistant alternating."""
    if not isinstance(conv, list) or len(conv) < 2:
        raise UserError(f"{where}: {key!r} must be a list of at least 2 turns")
    out = []
    for t, turn in enumerate(conv):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise UserError(f"{where}: {key}[{t}] must be an object with a string 'value'")
        role = turn.get("from", turn.get("role"))
        want = USER_ROLES if t % 2 == 0 else ASSISTANT_ROLES
        if role not in want:
            raise UserError(f"{where}: {key}[{t}] role {role!r}, expected one of {sorted(want)}")
        text = _bare(turn["value"]) if t % 2 == 0 else turn["value"].strip()
        out.append({"role": "user" if t % 2 == 0 else "assistant", "content": text})
    if out[-1]["role"] != "assistant":
        raise UserError(f"{where}: {key!r} must end with an assistant turn")
    return out


def vlquery_json(row: dict, where: str, **_) -> list[dict]:
    """{"image"?: "x.jpg", "conversations": [{"from": "user", "value"}, {"from": "assistant", ...}, ...]}."""
    return [{**_image(row, where), "messages": _turns(row.get("conversations"), where, "conversations")}]


TEMPLATED = re.compile(r"(^|\s)USER:.*ASSISTANT:\s*$", re.DOTALL)


def csr_pairs(row: dict, where: str, **_) -> list[dict]:
    """CSR's LLaVA-style pair: conversations / rejected_conversations, one human + one gpt turn each.
    The human turn is the bare question (as the loop writes it); the released construct.py output,
    whose human turn is the whole templated prompt, is refused: `evalsuite csr-convert pairs` converts it.
    A record the loop wrote with `pairs.template: released` says "template": "released": its templated
    human turn is taken as the question, as the released DPO takes it (templated again)."""
    chosen = _turns(row.get("conversations"), where, "conversations")
    rejected = _turns(row.get("rejected_conversations"), where, "rejected_conversations")
    if len(chosen) != 2 or len(rejected) != 2:
        raise UserError(f"{where}: CSR pairs have exactly one question and one answer per side")
    if chosen[0]["content"] != rejected[0]["content"]:
        raise UserError(f"{where}: conversations and rejected_conversations ask different questions")
    if TEMPLATED.search(chosen[0]["content"]) and row.get("template") != "released":
        raise UserError(f"{where}: the question is a templated prompt (USER: ... ASSISTANT:), as in CSR's released "
                        "json; convert the file first: evalsuite csr-convert pairs FILE --out OUT")
    return [{**_image(row, where), "prompt": chosen[0]["content"],
             "chosen": chosen[1]["content"], "rejected": rejected[1]["content"]}]


def _mean_rating(annotation: Any, where: str) -> float | None:
    """VL-RLHF: the mean of every aspect's rating; None (the completion is unusable, every pair with it
    is dropped) when a rating is text that is not a number ("N/A"), as its float() raises ValueError and
    the pair is skipped. A missing rating (no "Rating" key, null, not text or a number) stops VL-RLHF
    with a KeyError / TypeError (utils/data.py catches ValueError only): here it is an error naming the
    row, the completion and the aspect."""
    if not isinstance(annotation, dict):
        raise UserError(f"{where}: each completion annotation must be an object of aspect -> {{'Rating': ...}}")
    scores = []
    for aspect, value in annotation.items():
        rating = value.get("Rating") if isinstance(value, dict) else None
        if isinstance(rating, bool) or not isinstance(rating, (str, int, float)):
            raise UserError(f"{where}: aspect {aspect!r} has no rating ({rating!r}); VL-RLHF stops on it too")
        try:
            scores.append(float(rating))
        except ValueError:
            return None
    return sum(scores) / len(scores) if scores else None


def _completions(row: dict, where: str) -> list[tuple[str, float]]:
    """(response, mean rating) of every completion whose ratings are all numbers."""
    comps = row.get("completions")
    if isinstance(comps, dict):  # HF struct-of-lists form
        keys = ("annotations", "response")
        if not all(isinstance(comps.get(k), list) for k in keys):
            raise UserError(f"{where}: completions must hold 'annotations' and 'response' lists")
        comps = [{"annotations": a, "response": r} for a, r in zip(comps["annotations"], comps["response"])]
    if comps is None and "chosen" in row:  # vlfeedback_paired is dpo's default dataset_name (VL-RLHF's)
        raise UserError(f"{where}: no 'completions' (dataset_name vlfeedback_paired, dpo's default); a "
                        "prompt/chosen/rejected record is plain_dpo: --dataset_name plain_dpo")
    if not isinstance(comps, list):
        raise UserError(f"{where}: field 'completions' must be a list")
    out = []
    for c, comp in enumerate(comps):
        if not isinstance(comp, dict) or not isinstance(comp.get("response"), str):
            raise UserError(f"{where}: completions[{c}] needs a string 'response'")
        score = _mean_rating(comp.get("annotations"), f"{where}: completions[{c}]")
        if score is not None:
            out.append((comp["response"], score))
    return out


def select_pairs(scored: list[tuple[str, float]], score_margin: float) -> list[tuple[str, str]]:
    """All (chosen, rejected) pairs ordered by score, ties dropped; margin -1 keeps the largest gap(s)."""
    pairs = []
    for (ra, sa), (rb, sb) in combinations(scored, 2):
        if sa != sb:
            pairs.append((ra, rb, sa - sb) if sa > sb else (rb, ra, sb - sa))
    if not pairs:
        return []
    if score_margin == -1:
        best = max(gap for _, _, gap in pairs)
        return [(c, r) for c, r, gap in pairs if gap == best]
    return [(c, r) for c, r, gap in pairs if gap >= score_margin]


def vlfeedback_paired(row: dict, where: str, score_margin: float = -1.0, **_) -> list[dict]:
    """MMInstruction/VLFeedback row: prompt + rated completions -> the pairs `select_pairs` keeps.
    The image is `img_path` (VL-RLHF's column), else an `image` path or struct; a row with neither is
    an error, never a text-only example."""
    prompt = _bare(_text(row, "prompt", where))
    image = _image(row, where, key="img_path" if row.get("img_path") else "image")
    if image["image"] is None and image["image_bytes"] is None:
        raise UserError(f"{where}: VLFeedback rows need an image ('img_path' or 'image')")
    return [{**image, "prompt": prompt, "chosen": c, "rejected": r}
            for c, r in select_pairs(_completions(row, where), score_margin)]


def rlhfv(row: dict, where: str, **_) -> list[dict]:
    """HaoyeZhang/RLHF-V-Dataset row: `text` is JSON {question, chosen, rejected}; image or image_path."""
    text = row.get("text")
    if isinstance(text, str):
        try:
            text = json.loads(text)
        except json.JSONDecodeError:
            raise UserError(f"{where}: field 'text' is not valid JSON") from None
    if not isinstance(text, dict):
        raise UserError(f"{where}: field 'text' must be a JSON object with question/chosen/rejected")
    image = _image(row, where)
    if image["image_bytes"] is None and row.get("image_path"):
        image = _image(row, where, key="image_path")
    return [{**image, "prompt": _bare(_text(text, "question", where)),
             "chosen": _text(text, "chosen", where), "rejected": _text(text, "rejected", where)}]


CONVERTERS: dict[str, Callable[..., list[dict]]] = {
    "vlquery_json": vlquery_json,
    "plain_dpo": plain_dpo,
    "csr_pairs": csr_pairs,
    "vlfeedback_paired": vlfeedback_paired,
    "rlhfv": rlhfv,
}
