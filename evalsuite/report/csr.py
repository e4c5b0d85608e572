"""The report's training sections: CSR pair statistics, the widest-gap pairs with their images, and
the DPO training curves of each iteration (the `csr_train` runs, training/csr/train_log.py)."""
from __future__ import annotations

from pathlib import Path

from evalsuite.store.table import _num

CSR_TASK = "csr_pairs"
TRAIN_TASK = "csr_train"
CSR_METRICS = ("chosen_reward_mean", "rejected_reward_mean", "reward_gap", "chosen_relevance_mean",
               "rejected_relevance_mean", "num_pairs", "num_skipped")
# short column heads, so the table fits the page without a horizontal scroll (the full names in a title)
HEADS = {"chosen_reward_mean": "chosen reward", "rejected_reward_mean": "rejected reward",
         "reward_gap": "reward gap [95% CI]", "chosen_relevance_mean": "chosen relevance",
         "rejected_relevance_mean": "rejected relevance", "num_pairs": "pairs", "num_skipped": "skipped"}


def _fmt_stat(metric: str, v) -> str:
    from evalsuite.store.table import fmt

    if metric.startswith("num_") and _num(v) is not None:
        return str(round(float(v)))       # counts are counts: 2, not 2.000
    return fmt(v)


def _label(c: dict) -> str:
    return f"it{c['iteration']}" if c["iteration"] is not None else c["name"]


def csr_section(csr_tidy, csr_ckpts: list[dict], pair_samples, meta_of: dict | None = None,
                thumb=None, per_ckpt: int = 4, browse: list[dict] | None = None, n_boot: int = 1000,
                seed: int = 0) -> dict:
    """Chosen/rejected reward and gap per generating checkpoint, pair counts, and the widest-gap pairs
    (`per_ckpt` per generating checkpoint, each with its image through `thumb(path) -> data URI`).

    Pair statistics sit under the checkpoint that generated the pairs (as in `evalsuite table`); the
    table also says which CSR iteration trained on them (from the run footer's task config), and gives the
    reward gap a CI: a bootstrap (`n_boot`, `seed`) over the run's pairs of chosen - rejected reward. The
    densities and pairs are those of the `browse` checkpoints (default: all), as the browsers pick them."""
    from evalsuite.report.plots import csr_plots, density_plot
    from evalsuite.report.summary import _points, setups

    if csr_tidy is None or csr_tidy.empty:
        return {"plots": [], "table": [], "density": None, "pairs": [], "metric_names": [], "heads": [],
                "setups": False}
    plots, table, names = [], [], [m for m in CSR_METRICS if m in set(csr_tidy["metric"])]
    for _, setup, g in setups(csr_tidy, "task"):
        series = {m: _points(gm, csr_ckpts) for m, gm in g.groupby("metric", sort=False)}
        plots += [{"svg": svg, "setup": setup} for svg in csr_plots(series)]
        for c in csr_ckpts:
            rows = g[g["ckpt_id"] == c["ckpt_id"]]
            if rows.empty:
                continue
            vals = dict(zip(rows["metric"], rows["value"]))
            cells = [_fmt_stat(m, vals[m]) if m in vals else "-" for m in names]
            if "reward_gap" in names and "reward_gap" in vals:
                cells[names.index("reward_gap")] += " " + _gap_ci(pair_samples, rows.iloc[0]["run_id"], n_boot, seed)
            table.append({"name": c["name"], "iteration": c["iteration"], "setup": setup,
                          "trains": _trains_iteration((meta_of or {}).get(rows.iloc[0]["run_id"])), "vals": cells})
    density, pairs = None, []
    if not pair_samples.empty and {"chosen_relevance", "rejected_relevance"} <= set(pair_samples.columns):
        sets = {}
        browse = csr_ckpts if browse is None else browse
        for c in browse:
            g = pair_samples[pair_samples["ckpt_id"] == c["ckpt_id"]]
            if len(g):
                sets[f"{_label(c)} chosen"] = list(g["chosen_relevance"].map(_num))
                sets[f"{_label(c)} rejected"] = list(g["rejected_relevance"].map(_num))
        density = density_plot("relevance of chosen (solid) vs rejected (dashed)", sets)
        pairs = top_pairs(pair_samples, browse, per_ckpt, thumb)
    return {"plots": plots, "metric_names": names, "heads": [HEADS.get(m, m) for m in names], "table": table,
            "density": density, "pairs": pairs, "setups": any(r["setup"] for r in table)}


def _gap_ci(pair_samples, run_id: str, n_boot: int, seed: int) -> str:
    """"[low, high]" of the mean chosen - rejected reward over the run's pairs (a percentile bootstrap over
    pairs); "(no CI: ...)" saying what is missing when the run stored no per-pair rewards."""
    from evalsuite.metrics.stats import ratio_stat, sums_ci
    from evalsuite.store.table import fmt

    if pair_samples.empty or not {"chosen_reward", "rejected_reward"} <= set(pair_samples.columns):
        return "(no CI: no per-pair rewards stored)"
    g = pair_samples[pair_samples["run_id"] == run_id]
    gaps = [(c - r, 1.0) for c, r in zip(g["chosen_reward"].map(_num), g["rejected_reward"].map(_num))
            if c is not None and r is not None]
    if len(gaps) < 2:
        return "(no CI: fewer than 2 pairs with both rewards stored)"
    low, high = sums_ci(gaps, ratio_stat, n_boot, seed)
    return f"[{fmt(low, signed=True)}, {fmt(high, signed=True)}]"


def _trains_iteration(meta: dict | None):
    it = ((((meta or {}).get("tasks") or {}).get(CSR_TASK) or {}).get("config") or {}).get("iteration")
    return it if isinstance(it, int) and not isinstance(it, bool) else None


def top_pairs(ps, csr_ckpts: list[dict], per_ckpt: int = 4, thumb=None) -> list[dict]:
    """The `per_ckpt` pairs with the widest reward gap of each generating checkpoint, widest first."""
    if not {"chosen_reward", "rejected_reward"} <= set(ps.columns):
        return []
    ps = ps.assign(_gap=ps["chosen_reward"].map(_num).fillna(0) - ps["rejected_reward"].map(_num).fillna(0))
    out = []
    for c in csr_ckpts:
        g = ps[ps["ckpt_id"] == c["ckpt_id"]].sort_values("_gap", ascending=False, kind="stable").head(per_ckpt)
        for _, r in g.iterrows():
            image = r.get("image") if isinstance(r.get("image"), str) else None
            out.append({"ckpt": c["name"], "iteration": c["iteration"], "id": str(r.get("id", "")),
                        "prompt": str(r.get("prompt", "")), "chosen": str(r.get("chosen", "")),
                        "rejected": str(r.get("rejected", "")), "chosen_reward": _num(r.get("chosen_reward")),
                        "rejected_reward": _num(r.get("rejected_reward")), "gap": float(r["_gap"]),
                        "image_name": Path(image).name if image else "",
                        "thumb": thumb(image) if thumb and image else None})
    return out


def training_section(train_tidy, ckpts: list[dict], records: list[dict]) -> dict:
    """Curves per CSR iteration from the `csr_train` runs the table shows (one per trained checkpoint),
    and a small table of their final values."""
    from evalsuite.report.plots import training_plots
    from evalsuite.store.table import fmt

    if train_tidy is None or train_tidy.empty:
        return {"plots": [], "table": [], "metric_names": []}
    runs = dict(zip(train_tidy["ckpt_id"], train_tidy["run_id"]))
    steps: dict[str, list[dict]] = {}
    for r in records:
        if r.get("task") == TRAIN_TASK:
            steps.setdefault(r["run_id"], []).append(r)
    series, table = {}, []
    names = list(dict.fromkeys(train_tidy["metric"]))
    for c in ckpts:
        run = runs.get(c["ckpt_id"])
        if run is None:
            continue
        rows = sorted(steps.get(run, []), key=lambda r: (_num(r.get("step")) or 0))
        if rows:
            series[f"iteration {c['iteration']}" if c["iteration"] is not None else c["name"]] = rows
        g = train_tidy[train_tidy["ckpt_id"] == c["ckpt_id"]]
        vals = dict(zip(g["metric"], g["value"]))
        table.append({"name": c["name"], "iteration": c["iteration"], "steps": len(rows),
                      "vals": [fmt(vals[m]) if m in vals else "-" for m in names]})
    return {"plots": training_plots(series) if series else [], "table": table, "metric_names": names}
