"""Checkpoints x metrics, with the difference to the base checkpoint and its confidence interval.

`tidy_table(df)` turns store rows into one row per (checkpoint, metric): the latest value the store
holds for that checkpoint (a re-evaluation supersedes an older one; `--version` shows the older
state), its CI, and delta = value - base value with a CI. The base is the checkpoint of iteration 0,
or the first one in iteration order when no iteration 0 was evaluated.

The delta CI combines the two CIs by the MOVER method (Zou & Donner 2008): for d = a - b,
    low  = d - sqrt((a - a_low)^2 + (b_high - b)^2)
    high = d + sqrt((a_high - a)^2 + (b - b_low)^2)
It treats the two estimates as independent; both checkpoints are scored on the same images, so the
interval is conservative (a paired bootstrap over samples would be tighter).
"""
from __future__ import annotations

import fnmatch
import json
import math
from pathlib import Path

from evalsuite.errors import UserError

TIDY_COLUMNS = ["checkpoint", "ckpt_id", "iteration", "method", "ckpt", "ckpt_hash", "run_id",
                "metric_key", "task", "metric", "variant", "higher_is_better", "value", "ci_low",
                "ci_high", "n", "is_base", "delta", "delta_low", "delta_high"]


def metric_key(task: str, metric: str, variant) -> str:
    key = f"{task}/{metric}"
    return f"{key}[{variant}]" if isinstance(variant, str) and variant else key


def _num(x) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def interval(value, low, high, stderr=None) -> tuple[float | None, float | None]:
    """The CI of a row: its own bounds, else value +- 1.96 stderr, else none."""
    low, high, se = _num(low), _num(high), _num(stderr)
    if low is not None and high is not None:
        return low, high
    if se is not None and _num(value) is not None:
        return value - 1.96 * se, value + 1.96 * se
    return None, None


def delta_ci(a, a_ci, b, b_ci) -> tuple[float | None, float | None]:
    """MOVER interval of a - b from the two intervals (None when either is missing)."""
    (al, ah), (bl, bh) = a_ci, b_ci
    if None in (al, ah, bl, bh):
        return None, None
    d = a - b
    return d - math.hypot(a - al, bh - b), d + math.hypot(ah - a, b - bl)


def checkpoints(df):
    """One row per checkpoint (by content hash, else path, else run): name, iteration, order."""
    import pandas as pd

    df = df.copy()
    df["ckpt_id"] = df["ckpt_hash"].where(df["ckpt_hash"].notna() & (df["ckpt_hash"] != ""), df["ckpt"])
    df["ckpt_id"] = df["ckpt_id"].where(df["ckpt_id"].notna(), df["run_id"])
    # CSR pair statistics name the *generating* checkpoint with the iteration they train (t = its
    # iteration + 1): a checkpoint's own evaluation rows, where present, say what it is.
    by_eval_last = df.assign(_eval=df["task"] != "csr_pairs").sort_values("_eval", kind="stable")
    last = by_eval_last.groupby("ckpt_id", sort=False).tail(1).set_index("ckpt_id")
    first_seen = df.groupby("ckpt_id", sort=False)["written_at"].min()
    out = pd.DataFrame({
        "ckpt_id": last.index, "iteration": last["iteration"].values, "method": last["method"].values,
        "ckpt": last["ckpt"].values, "ckpt_hash": last["ckpt_hash"].values,
        "label": last["label"].values, "first_seen": first_seen.reindex(last.index).values,
    })
    out["name"] = [_name(r) for r in out.itertuples()]
    dup = out["name"].duplicated(keep=False)
    out.loc[dup, "name"] = [f"{n}@{str(i)[:8]}" for n, i in zip(out.loc[dup, "name"], out.loc[dup, "ckpt_id"])]
    out["_it"] = out["iteration"].astype("Float64").fillna(math.inf)
    out = out.sort_values(["_it", "first_seen"], kind="stable").drop(columns="_it").reset_index(drop=True)
    return out, df


def _name(r) -> str:
    if isinstance(r.label, str) and r.label:
        return r.label
    if isinstance(r.ckpt, str) and r.ckpt:
        return Path(r.ckpt.rstrip("/")).name or r.ckpt
    return str(r.ckpt_id)


def _select(keys: list[str], rows, patterns: list[str] | None) -> list[str]:
    if not patterns:
        return keys
    chosen: list[str] = []
    for pat in patterns:
        hits = [k for k, (task, metric) in zip(keys, rows)
                if fnmatch.fnmatchcase(k, pat) or fnmatch.fnmatchcase(metric, pat)
                or fnmatch.fnmatchcase(f"{task}/{metric}", pat)]
        if not hits:
            raise UserError(f"--metric {pat!r}: no such metric in the store; have: {', '.join(keys)}")
        chosen += [h for h in hits if h not in chosen]
    return [k for k in keys if k in chosen]


def tidy_table(df, metrics: list[str] | None = None):
    """Store rows -> one row per (checkpoint, metric) with delta vs base (see module doc)."""
    import pandas as pd

    if df.empty:
        raise UserError("the store holds no metric rows (write some with `evalsuite run --store DIR`)")
    ckpts, df = checkpoints(df)
    df["metric_key"] = [metric_key(t, m, v) for t, m, v in zip(df["task"], df["metric"], df["variant"])]
    latest = df.groupby(["ckpt_id", "metric_key"], sort=False).tail(1).set_index(["ckpt_id", "metric_key"])
    key_rows = df.drop_duplicates("metric_key")
    keys = _select(list(key_rows["metric_key"]), list(zip(key_rows["task"], key_rows["metric"])), metrics)
    base_id = _base(ckpts)
    out = []
    for c in ckpts.itertuples():
        for k in keys:
            if (c.ckpt_id, k) not in latest.index:
                continue
            r = latest.loc[(c.ckpt_id, k)]
            ci = interval(r["value"], r["ci_low"], r["ci_high"], r["stderr"])
            row = {"checkpoint": c.name, "ckpt_id": c.ckpt_id, "iteration": c.iteration, "method": c.method,
                   "ckpt": c.ckpt, "ckpt_hash": c.ckpt_hash, "run_id": r["run_id"], "metric_key": k,
                   "task": r["task"], "metric": r["metric"], "variant": r["variant"],
                   "higher_is_better": bool(r["higher_is_better"]), "value": float(r["value"]),
                   "ci_low": ci[0], "ci_high": ci[1], "n": r["n"], "is_base": c.ckpt_id == base_id,
                   "delta": None, "delta_low": None, "delta_high": None}
            if c.ckpt_id != base_id and (base_id, k) in latest.index:
                b = latest.loc[(base_id, k)]
                b_ci = interval(b["value"], b["ci_low"], b["ci_high"], b["stderr"])
                row["delta"] = float(r["value"]) - float(b["value"])
                row["delta_low"], row["delta_high"] = delta_ci(float(r["value"]), ci, float(b["value"]), b_ci)
            out.append(row)
    return pd.DataFrame(out, columns=TIDY_COLUMNS)


def _base(ckpts) -> str:
    zero = ckpts[ckpts["iteration"].astype("Float64") == 0]
    return (zero if len(zero) else ckpts).iloc[0]["ckpt_id"]


def fmt(x, signed: bool = False) -> str:
    """Compact number: 3 decimals below 10, 2 below 1000, none above or for whole counts >= 10."""
    x = _num(x)
    if x is None:
        return "-"
    a = abs(x)
    places = 0 if a >= 1000 or (a >= 10 and x.is_integer()) else 2 if a >= 10 else 3
    return f"{x:+.{places}f}" if signed else f"{x:.{places}f}"


def cell_text(r) -> str:
    s = fmt(r["value"])
    if _num(r["ci_low"]) is not None:
        s += f" [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]"
    if _num(r["delta"]) is not None:
        s += f" Δ {fmt(r['delta'], signed=True)}"
        if _num(r["delta_low"]) is not None:
            s += f" [{fmt(r['delta_low'], signed=True)}, {fmt(r['delta_high'], signed=True)}]"
    return s


def to_markdown(tidy) -> str:
    keys = list(dict.fromkeys(tidy["metric_key"]))
    hib = dict(zip(tidy["metric_key"], tidy["higher_is_better"]))
    head = ["checkpoint", "iter", "method"] + [f"{k} {'↑' if hib[k] else '↓'}" for k in keys]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, g in tidy.groupby("checkpoint", sort=False):
        first = g.iloc[0]
        cells = {r["metric_key"]: cell_text(r) for _, r in g.iterrows()}
        it = "-" if _num(first["iteration"]) is None else str(int(first["iteration"]))
        method = first["method"] if isinstance(first["method"], str) else "-"
        label = f"{name} (base)" if first["is_base"] else name
        lines.append("| " + " | ".join([_md(label), it, _md(method)] + [cells.get(k, "-") for k in keys]) + " |")
    return "\n".join(lines)


def _md(s: str) -> str:
    return str(s).replace("|", "\\|")


def to_csv(tidy) -> str:
    return tidy.drop(columns=["ckpt_id"]).to_csv(index=False)


def to_json(tidy) -> str:
    recs = json.loads(tidy.drop(columns=["ckpt_id"]).to_json(orient="records"))
    base = tidy.loc[tidy["is_base"], "checkpoint"]
    return json.dumps({"base": base.iloc[0] if len(base) else None, "rows": recs}, indent=2)
