"""The per-sample view: for a bounded set of images, every checkpoint's answer side by side.

Records of the caption-like tasks (any task with an `answer` about an `image`: caption, chair,
relevance) of one checkpoint's latest run are merged per (image, prompt), so CHAIR marks and relevance
scores of one answer sit together. The view keeps the images where checkpoints differ most (most
hallucinated-object disagreement, then relevance spread), so a bounded report still shows what changed.
"""
from __future__ import annotations

import base64
import io
import itertools
import logging
import math
import re
from pathlib import Path

log = logging.getLogger(__name__)

THUMB_PX = 144
# fields that belong to a sample's identity, not to what a task measured
_ID_FIELDS = {"run_id", "task", "key", "image_id", "image", "prompt", "answer"}


def _num(x) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def _items(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else []


def mark_answer(answer: str, mentioned: list) -> list[tuple[str, str | None]]:
    """Split `answer` into (text, cls) pieces, cls "hal" for hallucinated mentions, "ok" for grounded.

    A mention's `position` is used when it is a character offset of `word` (or a word index whose word
    starts with it); otherwise the first whole-word occurrence after the previous mark is taken. A mention
    found nowhere is not marked (the chips under the answer still list it)."""
    spans: list[tuple[int, int, str]] = []
    cursor = 0
    tokens = [(m.start(), m.end()) for m in re.finditer(r"\S+", answer)]
    for m in sorted((m for m in _items(mentioned) if isinstance(m, dict) and m.get("word")),
                    key=lambda m: m["position"] if isinstance(m.get("position"), int) else 1 << 30):
        word = str(m["word"])
        cls = "hal" if m.get("hallucinated") else "ok"
        span = _locate(answer, word, m.get("position"), tokens, cursor)
        if span and all(span[1] <= s or span[0] >= e for s, e, _ in spans):
            spans.append((span[0], span[1], cls))
            cursor = span[1]
    spans.sort()
    out, pos = [], 0
    for s, e, cls in spans:
        if s > pos:
            out.append((answer[pos:s], None))
        out.append((answer[s:e], cls))
        pos = e
    if pos < len(answer):
        out.append((answer[pos:], None))
    return out


def _locate(answer: str, word: str, position, tokens, cursor) -> tuple[int, int] | None:
    low = answer.lower()
    # whole word, plural allowed ("dog" marks "dogs"); no letter may follow
    pattern = re.compile(re.escape(word.lower()) + r"(?:e?s)?(?![A-Za-z])")
    if isinstance(position, int) and not isinstance(position, bool):
        starts = [position] + ([tokens[position][0]] if 0 <= position < len(tokens) else [])
        for s in starts:
            hit = pattern.match(low, s) if 0 <= s <= len(low) else None
            if hit and (s == 0 or not low[s - 1].isalpha()):
                return hit.start(), hit.end()
    for hit in itertools.chain(pattern.finditer(low, cursor), pattern.finditer(low)):
        if hit.start() == 0 or not low[hit.start() - 1].isalpha():
            return hit.start(), hit.end()
    return None


def thumbnail(path: str | None, roots: list[Path], cache: dict, notes: list[str] | None = None) -> str | None:
    """A data: URI of a small thumbnail of `path` (PNG, or JPEG when that is smaller), or None.

    An image that cannot be decoded (damaged, a decompression bomb) gets no thumbnail, a warning, and a
    line in `notes`; one bad file never stops the report."""
    if not path:
        return None
    if path in cache:
        return cache[path]
    from evalsuite.errors import UserError
    from evalsuite.images import open_rgb

    cands = [Path(path)] + [r / path for r in roots if not Path(path).is_absolute()]
    found = next((p for p in cands if p.is_file()), None)
    uri = None
    if found is not None:
        try:
            im = open_rgb(found)
            im.thumbnail((THUMB_PX, THUMB_PX))
            best = None
            for fmt, kw in (("PNG", {"optimize": True}), ("JPEG", {"quality": 78})):
                buf = io.BytesIO()
                im.save(buf, fmt, **kw)
                if best is None or buf.tell() < len(best[1]):
                    best = (fmt.lower(), buf.getvalue())
            uri = f"data:image/{best[0]};base64," + base64.b64encode(best[1]).decode("ascii")
        except (UserError, OSError) as e:
            log.warning("thumbnail skipped: %s", e)
            if notes is not None:
                notes.append(f"thumbnail skipped: {e}")
    cache[path] = uri
    return uri


def _merge(records: list[dict]) -> dict:
    """One answer's fields from the records of several tasks: the record with the most fields first (a
    scoring task's carries its source's answer fields and its own), and the per-sample values of every
    task's declared metrics together (`values`)."""
    merged: dict = {}
    for r in sorted(records, key=lambda r: (-sum(_num(v) is not None or isinstance(v, (str, list, dict))
                                                 for v in r.values()), str(r.get("task")))):
        for k, v in r.items():
            if k not in merged or merged[k] is None or (isinstance(merged[k], float) and math.isnan(merged[k])):
                merged[k] = v
    values = [r["values"] for r in records if isinstance(r.get("values"), dict)]
    if values:
        merged["values"] = {k: v for d in values for k, v in d.items()}
    return merged


def mentions_of(rec: dict) -> list[dict]:
    """The record's object mentions as [{word, category, position, hallucinated}], from either shape:
    `mentioned` (already that), or the CHAIR task's `mentions` [[word, category]] + `positions` +
    `hallucinated_positions`."""
    if _items(rec.get("mentioned")):
        return [m for m in rec["mentioned"] if isinstance(m, dict)]
    mentions = _items(rec.get("mentions"))
    positions = _items(rec.get("positions"))
    hal_pos = set(_items(rec.get("hallucinated_positions")))
    hal_pairs = [tuple(h) for h in _items(rec.get("hallucinated")) if isinstance(h, (list, tuple))]
    out = []
    for i, m in enumerate(mentions):
        if not isinstance(m, (list, tuple)) or len(m) < 2:
            continue
        pos = positions[i] if i < len(positions) else None
        hal = pos in hal_pos if hal_pos or not hal_pairs else tuple(m[:2]) in hal_pairs
        out.append({"word": str(m[0]), "category": str(m[1]), "position": pos, "hallucinated": hal})
    return out


def cell(rec: dict | None) -> dict | None:
    """What the template shows for one checkpoint's answer to one image."""
    if rec is None:
        return None
    answer = str(rec.get("answer") or "")
    mentioned = mentions_of(rec)
    hal = [str(m.get("word")) for m in mentioned if m.get("hallucinated")]
    ok = [str(m.get("word")) for m in mentioned if not m.get("hallucinated")]
    if not mentioned:
        hal = [str(h[0] if isinstance(h, (list, tuple)) else h) for h in _items(rec.get("hallucinated"))]
    chair_s = _num(rec.get("chair_s", rec.get("CHAIRs")))
    gt = _items(rec.get("gt")) or _items(rec.get("gt_objects"))
    return {
        "segments": mark_answer(answer, mentioned), "hal": hal, "ok": ok,
        "gt": [str(g) for g in gt], "chair_s": chair_s, "relevance": _num(rec.get("relevance")),
        "n_hal": len(hal),
    }


JUDGE_TEXT_CHARS = 1500     # a judge's reply shown at most this long (the page stays bounded)


def judgments(records: list[dict] | None, judges: dict) -> list[dict]:
    """The judge replies among one answer's records (a judged task's `judge_text`), each with its judge's
    label (`judges`: eval_key -> label, from the table), rating and whether the rating rule could read it."""
    out = []
    for r in records or ():
        text = r.get("judge_text")
        if not isinstance(text, str):
            continue
        parsed = r.get("parsed")
        out.append({"task": str(r.get("task") or ""), "judge": judges.get(r.get("eval_key")) or "",
                    "rating": _rating(r.get("rating")), "unparsable": parsed is False,
                    "text": text if len(text) <= JUDGE_TEXT_CHARS else text[:JUDGE_TEXT_CHARS] + " …"})
    return out


def _rating(v) -> str | None:
    x = _num(v)
    return None if x is None else str(int(x)) if x.is_integer() else f"{x:.3g}"


def build_view(samples, ckpt_of_run: dict, ckpts: list[dict], max_images: int, roots: list[Path],
               notes: list[str] | None = None, judges: dict | None = None) -> dict:
    """Rows for the per-sample section: [{image_id, image_name (the file name only: no machine path on
    the page), key, prompt, thumb, cells: [cell per checkpoint], flags ("changed": the checkpoints'
    answers differ; "hal": one names a hallucinated object)}]; images without a thumbnail are named in
    `notes`. A judged answer's cell lists its judge replies (`judgments`; `judges`: eval_key -> judge label)."""
    if samples.empty or "answer" not in samples.columns:
        return {"rows": [], "total": 0, "ckpts": []}
    # captions only: questions with a target answer (POPE, MME) have their own browser (report/qa.py)
    keep = samples["answer"].notna() & ~samples["task"].isin(["csr_pairs", "csr_train"])
    if "target" in samples.columns:
        keep &= samples["target"].isna()
    df = samples[keep]
    # plain dicts from here: per-row pandas access is ~100x slower at 10k records
    records = [_clean(r) for r in df.to_dict("records")]
    last_run: dict = {}
    for r in records:     # records come in store order, so the last run seen is the latest
        r["ckpt_id"] = ckpt_of_run.get(r["run_id"])
        last_run[(r["ckpt_id"], r["task"], r.get("eval_key"))] = r["run_id"]   # per evaluation setup
    groups: dict = {}
    for r in records:
        if r["ckpt_id"] is None or last_run[(r["ckpt_id"], r["task"], r.get("eval_key"))] != r["run_id"]:
            continue
        img = _ident(r.get("image_id", r.get("key")))
        per = groups.setdefault((img, str(r.get("prompt") or "")), {})
        per.setdefault(r["ckpt_id"], []).append(r)
    present = {cid for per in groups.values() for cid in per}
    order = [c["ckpt_id"] for c in ckpts if c["ckpt_id"] in present]
    ranked = []
    for (img, prompt), per in groups.items():
        merged = {cid: _merge(recs) for cid, recs in per.items()}
        cells = [cell(merged.get(cid)) for cid in order]
        for cid, c in zip(order, cells):
            if c is not None:
                c["judgments"] = judgments(per.get(cid), judges or {})
        ranked.append((_spread(cells), img, prompt, merged, cells))
    ranked.sort(key=lambda t: (-t[0], t[1], t[2]))
    cache: dict = {}
    rows = []
    for _, img, prompt, merged, cells in ranked[:max_images]:
        first = next(iter(merged.values()))
        image = first.get("image")
        answers = {str(m.get("answer") or "").strip() for m in merged.values()}
        flags = (["changed"] if len(answers) > 1 else []) + (["hal"] if any(c and c["n_hal"] for c in cells) else [])
        rows.append({"image_id": img, "prompt": prompt, "image_name": Path(str(image)).name if image else "",
                     "key": first.get("key"), "thumb": thumbnail(image, roots, cache, notes),
                     "cells": cells, "flags": " ".join(flags)})
    names = {c["ckpt_id"]: c["name"] for c in ckpts}
    return {"rows": rows, "total": len(ranked), "ckpts": [names[c] for c in order]}


def _ident(v) -> str:
    """An image id as text: 42 and 42.0 (a pandas column with gaps turns ints into floats) are "42"."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _clean(r: dict) -> dict:
    return {k: v for k, v in r.items() if not (isinstance(v, float) and math.isnan(v))}


def _spread(cells: list) -> float:
    """How much the checkpoints' answers differ: spread of hallucinated counts, then of relevance."""
    present = [c for c in cells if c is not None]
    if len(present) < 2:
        return -1.0
    hal = [c["n_hal"] for c in present]
    rel = [c["relevance"] for c in present if c["relevance"] is not None]
    return (max(hal) - min(hal)) + (0.5 * (max(rel) - min(rel)) if len(rel) >= 2 else 0.0)
