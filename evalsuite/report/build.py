"""`build_report(store, out)`: the results store -> one self-contained `out/index.html`.

Everything the page shows is in the file: plots are inline SVG, thumbnails are data: URIs, the CSS and
the small sorting/paging script are inlined. Every string from the store (answers, prompts, paths,
configs) goes through Jinja's autoescape; the script only moves and hides existing elements.
"""
from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import json
import logging
import math
from pathlib import Path

from evalsuite.errors import UserError

log = logging.getLogger(__name__)

CSR_TASK = "csr_pairs"
TEMPLATES = Path(__file__).resolve().parent / "templates"


def _num(x):
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def _ckpt_list(ckpts) -> list[dict]:
    return [{"ckpt_id": r.ckpt_id, "name": r.name, "iteration": None if _num(r.iteration) is None
             else int(r.iteration), "method": r.method if isinstance(r.method, str) else None}
            for r in ckpts.itertuples()]


def _delta_class(row) -> str:
    d = _num(row["delta"])
    if d is None or d == 0:
        return ""
    better = (d > 0) == bool(row["higher_is_better"])
    lo, hi = _num(row["delta_low"]), _num(row["delta_high"])
    sig = lo is not None and hi is not None and (lo > 0 or hi < 0)
    return ("better" if better else "worse") + ("" if sig else " ns")


def _setups(tidy, by: str):
    """(key, setup label, rows) per `by` value and eval setup, in table order."""
    for (key, _), g in tidy.groupby([by, "eval_key"], sort=False):
        yield key, g.iloc[0]["setup"], g


def summary(tidy, ckpts: list[dict]) -> list[dict]:
    """Rows = (metric, eval setup), columns = checkpoints: value [CI] and delta [CI] vs base, with sort
    keys. A metric measured in two setups gives two rows, labelled by what differs."""
    from evalsuite.store.table import fmt

    rows = []
    for key, setup, g in _setups(tidy, "metric_key"):
        by = {r["ckpt_id"]: r for _, r in g.iterrows()}
        first = g.iloc[0]
        cells = []
        for c in ckpts:
            r = by.get(c["ckpt_id"])
            if r is None:
                cells.append(None)
                continue
            ci = f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]" if _num(r["ci_low"]) is not None else ""
            delta = dci = ""
            if _num(r["delta"]) is not None:
                delta = fmt(r["delta"], signed=True)
                if _num(r["delta_low"]) is not None:
                    dci = f"[{fmt(r['delta_low'], signed=True)}, {fmt(r['delta_high'], signed=True)}]"
            sortv = _num(r["delta"]) if _num(r["delta"]) is not None else float(r["value"])
            cells.append({"value": fmt(r["value"]), "ci": ci, "delta": delta, "dci": dci,
                          "cls": _delta_class(r), "sort": sortv, "is_base": bool(r["is_base"]),
                          "n": None if _num(r["n"]) is None else int(r["n"])})
        rows.append({"key": key, "task": first["task"], "metric": first["metric"], "setup": setup,
                     "variant": first["variant"] if isinstance(first["variant"], str) else "",
                     "hib": bool(first["higher_is_better"]), "cells": cells})
    return rows


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


def iteration_plots(tidy, ckpts: list[dict]) -> list[dict]:
    """One plot per (metric, eval setup): a line only joins results of one setup."""
    from evalsuite.report.plots import metric_plot

    out = []
    for key, setup, g in _setups(tidy, "metric_key"):
        title = f"{key} [{setup}]" if setup else key
        out.append({"key": title, "svg": metric_plot(title, _points(g, ckpts), bool(g.iloc[0]["higher_is_better"]))})
    return out


CSR_METRICS = ("chosen_reward_mean", "rejected_reward_mean", "reward_gap", "chosen_relevance_mean",
               "rejected_relevance_mean", "num_pairs", "num_skipped")


def csr_section(csr_tidy, csr_ckpts: list[dict], pair_samples, meta_of: dict | None = None) -> dict:
    """Chosen/rejected reward and gap per generating checkpoint, pair counts, and the widest-gap pairs.

    Pair statistics sit under the checkpoint that generated the pairs (as in `evalsuite table`); the
    table also says which CSR iteration trained on them (from the run footer's task config)."""
    from evalsuite.report.plots import csr_plots, density_plot
    from evalsuite.store.table import fmt

    if csr_tidy is None or csr_tidy.empty:
        return {"plots": [], "table": [], "density": None, "pairs": [], "metric_names": [], "setups": False}
    plots, table, names = [], [], [m for m in CSR_METRICS if m in set(csr_tidy["metric"])]
    for _, setup, g in _setups(csr_tidy, "task"):
        series = {m: _points(gm, csr_ckpts) for m, gm in g.groupby("metric", sort=False)}
        plots += [{"svg": svg, "setup": setup} for svg in csr_plots(series)]
        for c in csr_ckpts:
            rows = g[g["ckpt_id"] == c["ckpt_id"]]
            if rows.empty:
                continue
            vals = dict(zip(rows["metric"], rows["value"]))
            table.append({"name": c["name"], "iteration": c["iteration"], "setup": setup,
                          "trains": _trains_iteration((meta_of or {}).get(rows.iloc[0]["run_id"])),
                          "vals": [fmt(vals[m]) if m in vals else "-" for m in names]})
    density, pairs = None, []
    if not pair_samples.empty and {"chosen_relevance", "rejected_relevance"} <= set(pair_samples.columns):
        sets = {}
        for c in csr_ckpts:
            g = pair_samples[pair_samples["ckpt_id"] == c["ckpt_id"]]
            if len(g):
                label = f"it{c['iteration']}" if c["iteration"] is not None else c["name"]
                sets[f"{label} chosen"] = list(g["chosen_relevance"].map(_num))
                sets[f"{label} rejected"] = list(g["rejected_relevance"].map(_num))
        density = density_plot("relevance of chosen (solid) vs rejected (dashed)", sets)
        pairs = _top_pairs(pair_samples, csr_ckpts)
    return {"plots": plots, "metric_names": names, "table": table, "density": density, "pairs": pairs,
            "setups": any(r["setup"] for r in table)}


def _trains_iteration(meta: dict | None):
    it = ((((meta or {}).get("tasks") or {}).get(CSR_TASK) or {}).get("config") or {}).get("iteration")
    return it if isinstance(it, int) and not isinstance(it, bool) else None


def _top_pairs(ps, csr_ckpts: list[dict], k: int = 12) -> list[dict]:
    if not {"chosen_reward", "rejected_reward"} <= set(ps.columns):
        return []
    ps = ps.assign(_gap=ps["chosen_reward"].map(_num).fillna(0) - ps["rejected_reward"].map(_num).fillna(0))
    names = {c["ckpt_id"]: c["name"] for c in csr_ckpts}
    out = []
    for _, r in ps.sort_values("_gap", ascending=False).head(k).iterrows():
        out.append({"ckpt": names.get(r["ckpt_id"], ""), "id": str(r.get("id", "")), "prompt": str(r.get("prompt", "")),
                    "chosen": str(r.get("chosen", "")), "rejected": str(r.get("rejected", "")),
                    "chosen_reward": _num(r.get("chosen_reward")), "rejected_reward": _num(r.get("rejected_reward")),
                    "gap": float(r["_gap"])})
    return out


def relevance_density(samples, eval_tidy, ckpts: list[dict]) -> str | None:
    """Per-sample relevance of each checkpoint (and setup, when there are several), base first, as
    KDE curves; the samples are those of the run the summary shows."""
    from evalsuite.report.plots import density_plot

    if samples.empty or "relevance" not in samples.columns:
        return None
    rel = samples[samples["task"] == "relevance"]
    shown = eval_tidy[eval_tidy["task"] == "relevance"].drop_duplicates(["ckpt_id", "eval_key"])
    names = {c["ckpt_id"]: c["name"] for c in ckpts}
    sets = {}
    for r in shown.itertuples():
        g = rel[rel["run_id"] == r.run_id]
        if len(g) and r.ckpt_id in names:
            name = f"{names[r.ckpt_id]} [{r.setup}]" if r.setup else names[r.ckpt_id]
            sets[name] = [v for v in g["relevance"].map(_num) if v is not None]
    if not sets:
        return None
    return density_plot("per-caption relevance: base vs iterations", sets)


def provenance(metas: list[dict], keep: set[str]) -> list[dict]:
    out = []
    for i, m in enumerate(metas, start=1):
        if m["run_id"] not in keep:
            continue
        tasks = m.get("tasks") or {}
        out.append({"version": i, "meta": {k: m.get(k) for k in (
            "run_id", "written_at", "created_at", "label", "ckpt", "ckpt_hash", "iteration", "method",
            "parent", "code_version", "lmms_eval_version", "config_hash", "samples_file")},
            "tasks": ", ".join(f"{t} v{d.get('version')}" for t, d in tasks.items()),
            "config": json.dumps(m.get("config") or {}, indent=2, sort_keys=True, default=str),
            "task_configs": json.dumps({t: {"config": d.get("config"), "extra": d.get("extra"),
                                            "eval_key": d.get("eval_key"), "identity": d.get("identity")}
                                        for t, d in tasks.items()}, indent=2, sort_keys=True, default=str)})
    return out


def _environment():
    import jinja2

    from evalsuite.store.table import fmt

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = fmt
    return env


def build_report(store, out: str | Path, *, as_of=None, runs=None, base: str | None = None,
                 max_images: int = 120, page_size: int = 8, image_roots: list[str | Path] = (),
                 title: str | None = None) -> Path:
    """Write `out/index.html` for the runs selected from `store` (a `Store`, or a `Snapshot` of one:
    the store is read once either way); returns its path."""
    from evalsuite.files import write_text_atomic
    from evalsuite.report.samples import build_view
    from evalsuite.store.table import build_table

    snap = store.snapshot() if hasattr(store, "snapshot") else store
    df = snap.metrics(as_of=as_of, runs=runs)
    if df.empty:
        raise UserError(f"{snap.path}: no metric rows to report (write some with `evalsuite run --store`)")
    keep = set(df["run_id"])
    metas = snap.run_meta()
    meta_of = {m["run_id"]: m for m in metas}
    table = build_table(df, base=base, run_meta=meta_of)
    tidy, ckpt_of_run = table.tidy, table.ckpt_of_run
    all_ckpts = _ckpt_list(table.ckpts)
    eval_tidy, csr_tidy = tidy[tidy["task"] != CSR_TASK], tidy[tidy["task"] == CSR_TASK]

    ctx: dict = {"summary": [], "plots": [], "ckpts": [], "bases": [], "explicit_base": base is not None}
    if not eval_tidy.empty:
        ckpts = _present(all_ckpts, eval_tidy)
        ctx.update(ckpts=ckpts, summary=summary(eval_tidy, ckpts), plots=iteration_plots(eval_tidy, ckpts),
                   bases=list(dict.fromkeys(eval_tidy["base"].dropna())))
    notes: list[str] = []     # what the page could not show (damaged sample files, bad images)
    # only the runs whose rows the page shows: each checkpoint's latest per metric and setup
    samples = snap.samples(run_id=set(tidy["run_id"]), problems=notes)
    samples["ckpt_id"] = samples["run_id"].map(ckpt_of_run)
    key_of = dict(zip(zip(tidy["run_id"], tidy["task"]), tidy["eval_key"]))
    samples["eval_key"] = [key_of.get(rt) for rt in zip(samples["run_id"], samples["task"])]
    pair_samples = samples[samples["task"] == CSR_TASK]
    ctx["csr"] = csr_section(csr_tidy, _present(all_ckpts, csr_tidy), pair_samples, meta_of)
    ctx["relevance_density"] = relevance_density(samples, eval_tidy, ctx["ckpts"])

    roots = [Path(r) for r in image_roots] + [Path(m["data_root"]) for m in metas
                                              if m["run_id"] in keep and m.get("data_root")]
    view = build_view(samples, ckpt_of_run, ctx["ckpts"], max_images, roots, notes)
    pages = [view["rows"][i:i + page_size] for i in range(0, len(view["rows"]), page_size)]
    ctx.update(view=view, pages=pages, provenance=provenance(metas, keep),
               title=title or f"evalsuite report: {snap.path}", store=str(snap.path),
               generated=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
               n_runs=len(keep), n_samples=len(samples), selector=_selector(as_of, runs, base), notes=notes)
    # the page's only script, allowed by its hash: injected inline code or handlers would not run
    script = (TEMPLATES / "report.js").read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    ctx.update(script=script, script_hash=f"sha256-{digest}")
    html = _environment().get_template("report.html.j2").render(**ctx)
    path = Path(out) / "index.html"
    try:
        write_text_atomic(path, html)
    except OSError as e:
        raise UserError(f"{path}: cannot write the report ({e.strerror or e})") from None
    log.info("report: %s (%.1f kB, %d runs, %d sample groups shown of %d)",
             path, len(html) / 1024, len(keep), len(view["rows"]), view["total"])
    return path


def _present(ckpts: list[dict], tidy) -> list[dict]:
    have = set(tidy["ckpt_id"])
    return [c for c in ckpts if c["ckpt_id"] in have]




def _selector(as_of, runs, base=None) -> str:
    parts = ([f"as of store version {as_of}"] if as_of is not None else []) + \
            ([f"runs {', '.join(runs)}"] if runs else []) + ([f"base {base}"] if base else [])
    return "; ".join(parts) or "latest store version, all runs"
