"""The question browser: POPE / MME (any task whose records carry a target answer), one row per question
with the truth and every checkpoint's answer, marked right or wrong.

A row is flagged "changed" when the checkpoints' answers differ, "hal" when one answered yes to an
object question whose truth is no (a hallucinated object), "wrong" when one is wrong. The page keeps
`max_rows` rows, changed ones first, then hallucinated, then wrong, then the rest (in document order).
Right/wrong is the task's own per-question score where the record has one (lmms-eval's
`pope_accuracy.score`, `mme_*_score.score`), else answer == truth ignoring case.
"""
from __future__ import annotations

import math
from pathlib import Path


def _text(v) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def _score(r: dict) -> float | None:
    for k, v in r.items():
        if isinstance(v, dict) and isinstance(v.get("score"), (int, float)) and k not in ("doc",):
            return float(v["score"])
    return None


def _said_yes(r: dict) -> bool:
    """The answer as a yes: lmms-eval's parsed POPE prediction where present, else a leading "yes"."""
    pope = r.get("pope_accuracy")
    if isinstance(pope, dict) and "prediction" in pope:
        return str(pope["prediction"]).strip().lower() == "yes"
    return _text(r.get("answer")).strip().lower().startswith("yes")


def answer_cell(r: dict | None) -> dict | None:
    if r is None:
        return None
    score = _score(r)
    truth = _text(r.get("target")).strip().lower()
    ok = (score == 1.0) if score is not None else _text(r.get("answer")).strip().lower() == truth
    return {"text": _text(r.get("answer")), "ok": ok, "hal": truth == "no" and _said_yes(r)}


def _row(task: str, setup: str, recs: list[dict | None]) -> dict:
    first = next(r for r in recs if r is not None)
    doc = first.get("doc") if isinstance(first.get("doc"), dict) else {}
    image = doc.get("image_source") or first.get("image") or doc.get("question_id") or first.get("image_id")
    cells = [answer_cell(r) for r in recs]
    present = [c for c in cells if c is not None]
    flags = (["changed"] if len({c["text"].strip().lower() for c in present}) > 1 else []) + \
        (["hal"] if any(c["hal"] for c in present) else []) + (["wrong"] if any(not c["ok"] for c in present) else [])
    return {"task": task, "setup": setup, "category": _text(doc.get("category")),
            "image": Path(_text(image)).name, "question": _text(doc.get("question") or first.get("prompt")),
            "truth": _text(first.get("target")), "cells": cells, "flags": " ".join(flags)}


def build_qa(records_of: dict, eval_tidy, ckpts: list[dict], max_rows: int = 400) -> dict:
    """{rows, total, counts (flagged questions among all `total`)} for the tasks whose records have a
    `target`; per (task, eval setup), the run each checkpoint's summary row came from."""
    groups: dict = {}
    for r in eval_tidy.drop_duplicates(["ckpt_id", "task", "eval_key"]).itertuples():
        recs = records_of.get((r.run_id, r.task)) or []
        if recs and "target" in recs[0]:
            groups.setdefault((r.task, r.eval_key, r.setup), {})[r.ckpt_id] = recs
    rows = []
    for (task, _, setup), per in groups.items():
        by_ckpt = {cid: {str(x.get("key")): x for x in recs} for cid, recs in per.items()}
        keys = list(dict.fromkeys(k for cid in by_ckpt for k in by_ckpt[cid]))
        for k in keys:
            rows.append(_row(task, setup, [by_ckpt.get(c["ckpt_id"], {}).get(k) for c in ckpts]))
    rank = {"changed": 0, "hal": 1, "wrong": 2}
    order = sorted(range(len(rows)), key=lambda i: (min((rank[f] for f in rows[i]["flags"].split()), default=3), i))
    shown = [rows[i] for i in order[:max_rows]]
    counts = {f: sum(f in r["flags"].split() for r in rows) for f in rank}
    return {"rows": shown, "total": len(rows), "counts": counts,
            "setups": any(r["setup"] for r in shown), "tasks": list(dict.fromkeys(r["task"] for r in shown))}
