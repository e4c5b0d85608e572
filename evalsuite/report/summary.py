"""The summary table, the headline above it and the per-metric plots: one rule for every delta.

Rows come from `store.table.build_table` + `store.paired.with_sample_stats` (the numbers `evalsuite
table` prints). A delta is coloured better / worse only when its 95% CI excludes 0 and the metric has a
direction; a delta with no CI is never coloured and says so; a diagnostic (direction "none": caption
length, the model's POPE yes ratio) is marked "changed" when significant, never better or worse.
Metrics of one task and setup whose values agree in every checkpoint, and differ between checkpoints
(relevance_mean = relevance_whole_mean for one-sentence captions), share one row and one plot.
A judged metric's row names its judge (one setup = one judge); a checkpoint whose base was scored only by
another judge shows "judge differs" where its delta would be (`store.compare.with_judges`).
"""
from __future__ import annotations

from evalsuite.store.table import _num, source_text
from evalsuite.lmms.metrics import POPE_SETTINGS

ARROW = {"up": "↑", "down": "↓", "none": "·"}
DIR_TEXT = {"up": "higher is better", "down": "lower is better", "none": "a diagnostic: no better or worse"}


def setups(tidy, by: str):
    """(key, setup label, rows) per `by` value and eval setup, in table order."""
    for (key, _), g in tidy.groupby([by, "eval_key"], sort=False):
        yield key, g.iloc[0]["setup"], g


def delta_class(row) -> str:
    """CSS class of a delta cell (module doc): better / worse / changed when significant, ns when its
    CI includes 0, noci without a CI, "" without a delta."""
    d = _num(row["delta"])
    if d is None:
        return ""
    lo, hi = _num(row["delta_low"]), _num(row["delta_high"])
    if lo is None or hi is None:
        return "noci"
    if not (lo > 0 or hi < 0):
        return "ns"
    if row["direction"] == "none":
        return "changed"
    return "better" if (d > 0) == (row["direction"] == "up") else "worse"


def _cell(r) -> dict:
    from evalsuite.store.table import fmt

    ci = f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]" if _num(r["ci_low"]) is not None else ""
    delta = dci = ""
    if _num(r["delta"]) is not None:
        delta = fmt(r["delta"], signed=True)
        if _num(r["delta_low"]) is not None:
            dci = f"[{fmt(r['delta_low'], signed=True)}, {fmt(r['delta_high'], signed=True)}]"
    sortv = _num(r["delta"]) if _num(r["delta"]) is not None else float(r["value"])
    return {"value": fmt(r["value"]), "ci": ci, "delta": delta, "dci": dci, "cls": delta_class(r),
            "sort": sortv, "is_base": bool(r["is_base"]), "n": None if _num(r["n"]) is None else int(r["n"]),
            "method": r["delta_method"] if isinstance(r["delta_method"], str) else "",
            "n_paired": None if _num(r["n_paired"]) is None else int(r["n_paired"]),
            "ci_source": r["ci_source"] if isinstance(r["ci_source"], str) else "", "raw": r,
            # the base was scored by another judge: the cell says so instead of a delta
            "note": _text(r.get("delta_note")) if not delta else "", "base_judge": _text(r.get("base_judge"))}


def _text(v) -> str:
    return v if isinstance(v, str) else ""


def _signature(rows) -> tuple:
    return tuple(None if v is None else float(f"{v:.10g}") for v in rows)


def summary(tidy, ckpts: list[dict]) -> list[dict]:
    """Rows = (metric, eval setup), columns = checkpoints: value [CI] and delta [CI] vs base. A metric
    measured in two setups gives two rows, labelled by what differs; metrics of one task and setup with
    equal values in every checkpoint are one row named after all of them."""
    rows, seen = [], {}
    for key, setup, g in setups(tidy, "metric_key"):
        by = {r["ckpt_id"]: r for _, r in g.iterrows()}
        first = g.iloc[0]
        values = [_num(by[c["ckpt_id"]]["value"]) if c["ckpt_id"] in by else None for c in ckpts]
        # a POPE setting is another set of questions: its rows never merge with another setting's; a
        # row that does not vary across checkpoints (all 0, or one checkpoint) equals others by chance
        subset = first["variant"] if first["variant"] in POPE_SETTINGS else None
        present = _signature(v for v in values if v is not None)
        sig = (first["task"], first["eval_key"], subset, _signature(values)) if len(set(present)) > 1 \
            else (key, first["eval_key"])
        if sig in seen:
            seen[sig]["also"].append(_label(first))
            continue
        row = {"key": key, "task": first["task"], "metric": first["metric"], "label": _label(first), "setup": setup,
               "variant": first["variant"] if isinstance(first["variant"], str) else "",
               "direction": first["direction"], "also": [], "judge": _text(first.get("judge")),
               "source": source_text(first["data"], first["split"], first["limit"]),
               "cells": [_cell(by[c["ckpt_id"]]) if c["ckpt_id"] in by else None for c in ckpts]}
        seen[sig] = row
        rows.append(row)
    return rows


def _label(r) -> str:
    v = r["variant"] if isinstance(r["variant"], str) and r["variant"] else ""
    return f"{r['metric']}[{v}]" if v else r["metric"]


def headline(rows: list[dict], ckpts: list[dict]) -> dict | None:
    """Base vs the last checkpoint of its lineage, every summary row: which deltas are significant."""
    if not rows or len(ckpts) < 2:
        return None
    idx = {c["ckpt_id"]: i for i, c in enumerate(ckpts)}
    pairs = {}
    for r in rows:
        cells = [c for c in r["cells"] if c is not None]
        base = next((c for c in cells if c["is_base"]), None)
        later = [c for c in cells if not c["is_base"] and c["delta"]]
        if base is None or not later:
            continue
        last = max(later, key=lambda c: idx.get(c["raw"]["ckpt_id"], -1))
        pairs.setdefault((base["raw"]["checkpoint"], last["raw"]["checkpoint"]), []).append((r, base, last))
    if not pairs:
        return None
    (base_name, last_name), items = max(pairs.items(), key=lambda kv: len(kv[1]))
    out = {"base": base_name, "last": last_name, "iteration": items[0][2]["raw"]["iteration"],
           "better": [], "worse": [], "changed": [], "ns": [], "noci": []}
    for r, b, c in items:
        name = " = ".join([r["label"]] + r["also"])
        entry = {"name": name + (f" [{r['setup']}]" if r["setup"] else ""), "task": r["task"],
                 "from": b["value"], "to": c["value"], "delta": c["delta"], "dci": c["dci"],
                 "method": c["method"], "n_paired": c["n_paired"], "arrow": ARROW.get(r["direction"], "")}
        out[c["cls"] if c["cls"] in out else "noci"].append(entry)
    # judged metrics the last checkpoint has only under another judge than the base's: named, not compared
    out["judge_differs"] = [{"name": r["label"] + (f" [{r['setup']}]" if r["setup"] else ""), "task": r["task"],
                             "judge": r["judge"], "base_judge": c["base_judge"]}
                            for r in rows for c in r["cells"]
                            if c is not None and c["note"] and c["raw"]["checkpoint"] == last_name]
    out["sentence"] = headline_sentence(out)
    return out


def headline_sentence(h: dict) -> str:
    """The headline's words: the metrics that got significantly better and those that got significantly
    worse, named per task (a count alone reads as a verdict; which metrics moved is the trade-off)."""
    def named(entries: list[dict]) -> str:
        tasks: dict[str, list[str]] = {}
        for e in entries:
            tasks.setdefault(e["task"], []).append(e["name"])
        return "; ".join(f"{task}: {', '.join(names)}" for task, names in tasks.items())

    parts = [f"significantly better: {named(h['better'])}" if h["better"] else "nothing significantly better",
             f"significantly worse: {named(h['worse'])}" if h["worse"] else "nothing significantly worse"]
    if h["changed"]:
        parts.append(f"diagnostics changed: {named(h['changed'])}")
    rest = [f"{len(h['ns'])} changed within noise"] if h["ns"] else []
    if h["noci"]:
        rest.append(f"{len(h['noci'])} without a CI")
    return " — ".join(parts) + (f" ({', '.join(rest)})" if rest else "")


def _points(g, ckpts: list[dict]) -> list[dict]:
    by = {r["ckpt_id"]: r for _, r in g.iterrows()}
    pts = []
    for c in ckpts:
        r = by.get(c["ckpt_id"])
        if r is not None:
            pts.append({"name": c["name"], "iteration": c["iteration"], "value": float(r["value"]),
                        "ci_low": _num(r["ci_low"]), "ci_high": _num(r["ci_high"])})
    if any(p["ci_low"] is None for p in pts):
        for p in pts:
            p["ci_low"] = p["ci_high"] = None
    return pts


def iteration_plots(tidy, rows: list[dict], ckpts: list[dict]) -> list[dict]:
    """One plot per summary row (a line only joins results of one setup; equal metrics share a plot)."""
    from evalsuite.report.plots import metric_plot

    shown = {(r["key"], r["setup"]): r for r in rows}
    out = []
    for key, setup, g in setups(tidy, "metric_key"):
        r = shown.get((key, setup))
        if r is None:
            continue
        named = r["judge"] and r["judge"] not in (setup or "")   # a setup label may already name the judge
        title = (f"{key} [{setup}]" if setup else key) + (f" judge {r['judge']}" if named else "")
        also = f"= {' = '.join(r['also'])} (equal values)" if r["also"] else ""
        out.append({"key": title, "also": also, "svg": metric_plot(title, _points(g, ckpts), r["direction"])})
    return out
