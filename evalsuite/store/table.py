"""Checkpoints x metrics, with the difference to a base checkpoint and its confidence interval.

`build_table(df)` turns store rows into one row per (checkpoint, metric, eval setup): the latest
value the store holds for that checkpoint in that setup (a re-evaluation supersedes an older one;
`--version` shows the older state), its CI, and delta = value - base value with a CI.

Comparable means one `eval_key` (task, version and the identity: data, split, documents, prompt,
generation settings, options; see `evalsuite.types.eval_key`). A checkpoint evaluated two ways gives
two rows, labelled by the setup fields that differ (`evalsuite.store.setups`), and a delta is taken
only against the base's row of the same eval_key. The base is chosen per lineage: checkpoints linked
through their manifests' `parent` form one lineage, whose base is its iteration-0 checkpoint (else
its first in iteration order); a checkpoint related to no other gets no delta, since a delta between
unrelated models means nothing. `--base NAME` makes one checkpoint the base of all.

Rows place under the checkpoint in their `ckpt` columns, with no exception: CSR pair statistics of
iteration t sit on the row of M_{t-1}, the checkpoint that generated the pairs (also named in their
`generator` column); the report places them the same way.

The delta CI built here combines the two rows' CIs by the MOVER method (Zou & Donner 2008): for d = a - b,
    low  = d - sqrt((a - a_low)^2 + (b_high - b)^2)
    high = d + sqrt((a_high - a)^2 + (b - b_low)^2)
which treats the two estimates as independent. Where both checkpoints' per-sample values are stored,
`store.paired.with_sample_stats` replaces it by a paired bootstrap over the shared samples (tighter: both
checkpoints answer the same images); `store.compare.compare` composes the two for `evalsuite table` and the
report, and the table's notes say which deltas got which interval.
"""
from __future__ import annotations

import fnmatch
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from evalsuite.errors import UserError

TIDY_COLUMNS = ["checkpoint", "ckpt_id", "iteration", "method", "ckpt", "ckpt_hash", "run_id",
                "metric_key", "task", "metric", "variant", "higher_is_better", "value", "ci_low",
                "ci_high", "n", "is_base", "delta", "delta_low", "delta_high", "setup", "eval_key",
                "eval_setup", "base", "generator", "data", "split", "limit", "direction"]


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


def _ckpt_ids(df):
    ids = df["ckpt_hash"].where(df["ckpt_hash"].notna() & (df["ckpt_hash"] != ""), df["ckpt"])
    return ids.where(ids.notna(), df["run_id"])


def checkpoints(df):
    """One row per checkpoint (by content hash, else path, else run): name, iteration, lineage, order.

    A checkpoint's attributes (iteration, method, label, path) are the latest non-null values its
    rows carry, so a row written without a label never blanks the checkpoint's name. `lineage`
    numbers the groups of checkpoints linked by `parent` (a manifest's parent path, or a hash) to
    another checkpoint in the rows."""
    import pandas as pd

    df = df.copy()
    df["ckpt_id"] = _ckpt_ids(df)
    g = df.groupby("ckpt_id", sort=False)
    last = g[["iteration", "method", "ckpt", "ckpt_hash", "label"]].last()
    out = pd.DataFrame({
        "ckpt_id": last.index, "iteration": last["iteration"].values, "method": last["method"].values,
        "ckpt": last["ckpt"].values, "ckpt_hash": last["ckpt_hash"].values, "label": last["label"].values,
        "first_seen": g["written_at"].min().reindex(last.index).values,
    })
    out["name"] = [_name(r) for r in out.itertuples()]
    dup = out["name"].duplicated(keep=False)
    out.loc[dup, "name"] = [f"{n}@{str(i)[:8]}" for n, i in zip(out.loc[dup, "name"], out.loc[dup, "ckpt_id"])]
    out["_it"] = out["iteration"].astype("Float64").fillna(math.inf)
    out = out.sort_values(["_it", "first_seen"], kind="stable").reset_index(drop=True)
    out["lineage"] = _lineages(df, list(out["ckpt_id"]))
    # each lineage together, in iteration order
    out = out.sort_values(["lineage", "_it", "first_seen"], kind="stable").drop(columns="_it")
    return out.reset_index(drop=True), df


def _norm(p) -> str | None:
    if not isinstance(p, str) or not p:
        return None
    return p.rstrip("/") or p


def _lineages(df, order: list) -> list[int]:
    """Connected groups of checkpoints under child -> parent links, numbered in checkpoint order."""
    by_ref: dict[str, set] = {}
    for cid, path, h in zip(df["ckpt_id"], df["ckpt"], df["ckpt_hash"]):
        for ref in (_norm(path), _norm(h)):
            if ref:
                by_ref.setdefault(ref, set()).add(cid)
    root = {c: c for c in order}

    def find(c):
        while root[c] != c:
            root[c] = root[root[c]]
            c = root[c]
        return c

    for cid, parent in set(zip(df["ckpt_id"], df["parent"])):
        for other in by_ref.get(_norm(parent), ()) or _relative_hits(by_ref, parent):
            root[find(cid)] = find(other)
    numbers: dict = {}
    return [numbers.setdefault(find(c), len(numbers)) for c in order]


def _relative_hits(by_ref: dict, parent) -> set:
    """Checkpoints whose absolute path ends with a relative `parent` (as manifests written from a
    working directory hold it, and stores before schema v3 kept it)."""
    rel = _norm(parent)
    if rel is None or rel.startswith("/"):
        return set()
    tail = "/" + (rel[2:] if rel.startswith("./") else rel)
    return {c for ref, ids in by_ref.items() if ref.endswith(tail) for c in ids}


# folder names that say what a folder holds, not which model: such a checkpoint is named parent/folder
_GENERIC = re.compile(r"^(merged|final|model|adapter|output|outputs|best|last|latest|hf|weights|"
                      r"checkpoint(-\d+)?|ckpt(-\d+)?)$", re.I)


def _name(r) -> str:
    """A checkpoint's label, else its folder's name (parent/folder for a generic one: iter_2/merged)."""
    if isinstance(r.label, str) and r.label:
        return r.label
    if isinstance(r.ckpt, str) and r.ckpt:
        path = Path(r.ckpt.rstrip("/"))
        if _GENERIC.match(path.name) and path.parent.name:
            return f"{path.parent.name}/{path.name}"
        return path.name or r.ckpt
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


def bases(ckpts, explicit: str | None = None) -> dict:
    """ckpt_id -> the ckpt_id its deltas are taken against (None: no delta).

    Without `explicit`, each lineage of two or more checkpoints has its own base: its iteration-0
    checkpoint, else its first in iteration order; a checkpoint linked to no other has none (a delta
    between unrelated models means nothing). `explicit` (a name, path or hash prefix) is the base of all."""
    if explicit is not None:
        b = find_checkpoint(ckpts, explicit)
        return {c: b for c in ckpts["ckpt_id"]}
    out = {}
    for _, g in ckpts.groupby("lineage", sort=False):
        if len(g) < 2:
            out[g.iloc[0]["ckpt_id"]] = None
            continue
        zero = g[g["iteration"].astype("Float64") == 0]
        b = (zero if len(zero) else g).iloc[0]["ckpt_id"]
        out.update({c: b for c in g["ckpt_id"]})
    return out


def find_checkpoint(ckpts, ref: str) -> str:
    """The ckpt_id `ref` names: a checkpoint's name, its path, or a prefix (>= 6) of its hash."""
    for col in ("name", "ckpt", "ckpt_id"):
        hit = ckpts[ckpts[col].map(_norm) == _norm(ref)]
        if len(hit) == 1:
            return hit.iloc[0]["ckpt_id"]
    hit = ckpts[[len(ref) >= 6 and str(c).startswith(ref) for c in ckpts["ckpt_id"]]]
    if len(hit) == 1:
        return hit.iloc[0]["ckpt_id"]
    raise UserError(f"--base {ref!r}: {'ambiguous' if len(hit) > 1 else 'no such checkpoint'}; "
                    f"have: {', '.join(ckpts['name'])}")


class Shared(dict):
    """A dict kept in DataFrame.attrs and never changed: pandas deep-copies attrs on every slice, which at
    thousands of runs costs more than the table itself; this one is shared instead."""

    def __deepcopy__(self, memo):
        return self


@dataclass
class Table:
    """What `build_table` computed: the tidy rows and the checkpoints they came from (with ids); the
    records `store.compare.compare` read for them."""

    tidy: object         # DataFrame with TIDY_COLUMNS
    ckpts: object        # DataFrame from `checkpoints`
    ckpt_of_run: dict    # run_id -> ckpt_id
    records: list = field(default_factory=list)        # per-sample records read, in store order
    records_of: dict = field(default_factory=dict)     # (run_id, task) -> its records


def tidy_table(df, metrics: list[str] | None = None, base: str | None = None, run_meta: dict | None = None):
    """Store rows -> one row per (checkpoint, metric, eval setup) with delta vs base (module doc)."""
    return build_table(df, metrics, base, run_meta).tidy


def build_table(df, metrics: list[str] | None = None, base: str | None = None,
                run_meta: dict | None = None) -> Table:
    """`tidy_table` plus the checkpoint frame; `run_meta` (run_id -> footer meta) adds data/limit."""
    import pandas as pd

    from evalsuite.store.setups import parse_setup, task_labels

    if df.empty:
        raise UserError("the store holds no metric rows (write some with `evalsuite run --store DIR`)")
    ckpts, df = checkpoints(df)
    df["metric_key"] = [metric_key(t, m, v) for t, m, v in zip(df["task"], df["metric"], df["variant"])]
    labels = task_labels(df)
    latest = df.groupby(["ckpt_id", "metric_key", "eval_key"], sort=False).tail(1)
    key_rows = df.drop_duplicates("metric_key")
    keys = _select(list(key_rows["metric_key"]), list(zip(key_rows["task"], key_rows["metric"])), metrics)
    setups_of = {k: list(dict.fromkeys(g["eval_key"])) for k, g in df.groupby("metric_key", sort=False)}
    # plain dicts: a pandas lookup per cell is most of the time at thousands of runs
    latest = {(r["ckpt_id"], r["metric_key"], r["eval_key"]): r for r in latest.to_dict("records")}
    base_of = bases(ckpts, base)
    names = dict(zip(ckpts["ckpt_id"], ckpts["name"]))
    out, specs, parsed = [], {}, {}
    for c in ckpts.itertuples():
        b = base_of.get(c.ckpt_id)
        for k in keys:
            for e in setups_of[k]:
                r = latest.get((c.ckpt_id, k, e))
                if r is None:
                    continue
                row = _tidy_row(c, k, e, r, is_base=b == c.ckpt_id, base=names.get(b))
                row["setup"] = labels.get((r["task"], e), "")
                if r["eval_setup"] not in parsed:
                    parsed[r["eval_setup"]] = parse_setup(r["eval_setup"])
                row["eval_setup"] = parsed[r["eval_setup"]]
                row.update(_source(r["task"], (run_meta or {}).get(r["run_id"])))
                row["direction"] = _direction(r, specs.setdefault((r["run_id"], r["task"]),
                                                                  _specs(r["task"], (run_meta or {}).get(r["run_id"]))))
                if b is not None and b != c.ckpt_id and (b, k, e) in latest:
                    _add_delta(row, latest[(b, k, e)])
                out.append(row)
    tidy = pd.DataFrame(out, columns=TIDY_COLUMNS)
    tidy.attrs["metric_specs"] = Shared(specs)  # (run_id, task) -> the specs its run stored (store.paired)
    return Table(tidy=tidy, ckpts=ckpts, ckpt_of_run=dict(zip(df["run_id"], df["ckpt_id"])))


def _tidy_row(c, k, e, r, *, is_base: bool, base) -> dict:
    ci = interval(r["value"], r["ci_low"], r["ci_high"], r["stderr"])
    return {"checkpoint": c.name, "ckpt_id": c.ckpt_id, "iteration": c.iteration, "method": c.method,
            "ckpt": c.ckpt, "ckpt_hash": c.ckpt_hash, "run_id": r["run_id"], "metric_key": k,
            "task": r["task"], "metric": r["metric"], "variant": r["variant"],
            "higher_is_better": bool(r["higher_is_better"]), "value": float(r["value"]),
            "ci_low": ci[0], "ci_high": ci[1], "n": r["n"], "is_base": is_base,
            "delta": None, "delta_low": None, "delta_high": None, "eval_key": e, "base": base,
            "generator": r["generator"] if isinstance(r["generator"], str) else None}


def _add_delta(row: dict, b) -> None:
    b_ci = interval(b["value"], b["ci_low"], b["ci_high"], b["stderr"])
    row["delta"] = row["value"] - float(b["value"])
    row["delta_low"], row["delta_high"] = delta_ci(row["value"], (row["ci_low"], row["ci_high"]),
                                                   float(b["value"]), b_ci)


def _specs(task: str, meta: dict | None) -> dict:
    """{metric: {direction, stat, ci, per_sample}} a task's run stored (`evalsuite.tasks.metric_spec`);
    {} for runs written before tasks declared them."""
    extra = (((meta or {}).get("tasks") or {}).get(task) or {}).get("extra") or {}
    specs = extra.get("metric_specs")
    return specs if isinstance(specs, dict) else {}


def _direction(r, specs: dict) -> str:
    """The declared direction; runs that declared none: the stored higher_is_better."""
    d = (specs.get(r["metric"]) or {}).get("direction")
    return d if d in ARROWS else ("up" if bool(r["higher_is_better"]) else "down")


def _relative(data: str, root) -> str:
    """`data` (one path, or several joined by "; ") with each path written short: relative to the data root
    `root` when it lies inside it (`root` written relative, as a run started in another folder records it,
    matches where its parts appear in the path), else its folder and file name. A table names the files of
    the data, not the machine that read them."""
    base = Path(root) if isinstance(root, str) and root else None
    parts = []
    for part in re.split(r"(; |, )", data):     # a leaf's files by ", ", a group's leaves by "; "
        p = Path(part)
        parts.append(_short(p, base) if p.is_absolute() else part)
    return "".join(parts)


def _short(p: Path, root: Path | None) -> str:
    if root is not None:
        try:
            return p.relative_to(root).as_posix()
        except ValueError:
            pass
        want = [x for x in root.parts if x not in ("/", ".")]
        have = p.parts
        for i in range(len(have) - len(want), 0, -1):
            if want and list(have[i:i + len(want)]) == want and i + len(want) < len(have):
                return Path(*have[i + len(want):]).as_posix()
    return Path(*p.parts[-2:]).as_posix() if len(p.parts) > 2 else p.as_posix()


def _source(task: str, meta: dict | None) -> dict:
    """Where a row's documents came from, as far as its run footer says: the data (an lmms-eval task's own
    `data_source`: its files or hub id, else the run's data root), split, limit."""
    meta = meta or {}
    cfg = ((meta.get("tasks") or {}).get(task) or {}).get("config") or {}
    run_cfg = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    data = cfg.get("data_source") or meta.get("data_root") or cfg.get("data") or cfg.get("data_root")
    if cfg.get("data_source") and isinstance(data, str):
        data = _relative(data, meta.get("data_root"))
    limit = cfg.get("limit", run_cfg.get("limit"))
    return {"data": None if data is None else str(data) if not isinstance(data, dict) else
            json.dumps(data, sort_keys=True, default=str),
            "split": cfg.get("split") if isinstance(cfg.get("split"), str) else None,
            "limit": limit if isinstance(limit, int) and not isinstance(limit, bool) else None}


def lead_metrics(tidy) -> list[str]:
    """The headline metric keys: per task, its first declared metric with a direction ("up"/"down"),
    on the whole set where it has such a row (POPE's accuracy, not its per-setting ones), in table order.
    The report's summary leads with these; `evalsuite table --format md` shows only these unless asked."""
    specs = tidy.attrs.get("metric_specs") or {}
    out = []
    for task, g in tidy.drop_duplicates("metric_key").groupby("task", sort=False):
        declared = next((list(s) for (_, t), s in specs.items() if t == task and s), [])
        metrics = sorted(dict.fromkeys(g["metric"]), key=lambda m: declared.index(m) if m in declared else len(declared))
        lead = next((m for m in metrics if direction_of(g[g["metric"] == m].iloc[0]) != "none"), None)
        if lead is None:
            continue
        rows = g[g["metric"] == lead]
        whole = rows[rows["variant"].map(lambda v: not (isinstance(v, str) and v))]
        out.append((whole if len(whole) else rows).iloc[0]["metric_key"])
    return out


def headline_keys(tidy):
    """`tidy` limited to the headline metrics (`lead_metrics`); attrs["left_out"] counts the others."""
    keys = lead_metrics(tidy)
    out = tidy[tidy["metric_key"].isin(keys)].copy()
    out.attrs.update(tidy.attrs)
    out.attrs["left_out"] = tidy["metric_key"].nunique() - len(keys)
    return out


def fmt(x, signed: bool = False) -> str:
    """Compact number: 3 decimals below 10, 2 below 1000, none above or for whole counts >= 10."""
    x = _num(x)
    if x is None:
        return "-"
    a = abs(x)
    places = 0 if a >= 1000 or (a >= 10 and x.is_integer()) else 2 if a >= 10 else 3
    return f"{x:+.{places}f}" if signed else f"{x:.{places}f}"


ARROWS = {"up": "↑", "down": "↓", "none": "·"}


def significant(r) -> bool | None:
    """Whether a row's delta CI excludes 0 (None: no delta CI): the report colours exactly these."""
    lo, hi = _num(r["delta_low"]), _num(r["delta_high"])
    return None if lo is None or hi is None else bool(lo > 0 or hi < 0)


def direction_of(r) -> str:
    d = r.get("direction") if hasattr(r, "get") else None
    return d if isinstance(d, str) and d in ARROWS else ("up" if bool(r["higher_is_better"]) else "down")


def cell_text(r) -> str:
    s = fmt(r["value"])
    if _num(r["ci_low"]) is not None:
        s += f" [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]"
    if _num(r["delta"]) is not None:
        s += f" Δ {fmt(r['delta'], signed=True)}"
        if _num(r["delta_low"]) is not None:
            s += f" [{fmt(r['delta_low'], signed=True)}, {fmt(r['delta_high'], signed=True)}]"
            s += "*" if significant(r) else ""
    elif isinstance(r.get("delta_note"), str) and r.get("delta_note"):
        s += f" Δ {r['delta_note']}"      # the base was scored by another judge: no number pairs the two
    if _num(r["n"]) is not None:
        s += f" (n={int(r['n'])})"
    return s


def to_markdown(tidy) -> str:
    """Rows = (checkpoint, setup), columns = metrics; notes below say what Δ is against and where
    the documents came from."""
    keys = list(dict.fromkeys(tidy["metric_key"]))
    arrow = {r["metric_key"]: ARROWS[direction_of(r)] for _, r in tidy.drop_duplicates("metric_key").iterrows()}
    with_setup = bool((tidy["setup"] != "").any())
    with_judge = "judge" in tidy.columns and bool(tidy["judge"].notna().any())
    head = ["checkpoint", "iter", "method"] + (["setup"] if with_setup else []) + (["judge"] if with_judge else []) + \
        [f"{k} {arrow[k]}" for k in keys]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (name, setup), g in tidy.groupby(["checkpoint", "setup"], sort=False):
        first = g.iloc[0]
        cells = {r["metric_key"]: cell_text(r) for _, r in g.iterrows()}
        it = "-" if _num(first["iteration"]) is None else str(int(first["iteration"]))
        method = first["method"] if isinstance(first["method"], str) else "-"
        label = f"{name} (base)" if first["is_base"] else name
        lines.append("| " + " | ".join([_md(label), it, _md(method)] + ([_md(setup or "-")] if with_setup else [])
                                       + ([_md(row_judges(g))] if with_judge else [])
                                       + [cells.get(k, "-") for k in keys]) + " |")
    return "\n".join(lines + _notes(tidy))


def row_judges(g) -> str:
    """The judges of one table row's judged cells: one label, or "task: label" each when they differ."""
    judged = g[g["judge"].notna()].drop_duplicates(["task", "judge"])
    if judged.empty:
        return "-"
    if judged["judge"].nunique() == 1:
        return str(judged["judge"].iloc[0])
    return "; ".join(f"{t}: {j}" for t, j in zip(judged["task"], judged["judge"]))


def _notes(tidy) -> list[str]:
    out = _ci_notes(tidy)
    if "delta_note" in tidy.columns and (tidy["delta_note"] == "judge differs").any():
        out.append("Δ judge differs: the base was scored by another judge (a judged metric is compared only "
                   "between results of one judge; evaluate the base with the same judge for a Δ).")
    if tidy.attrs.get("left_out"):
        out.append(f"Headline metrics only (each task's lead metric); {tidy.attrs['left_out']} more with --all "
                   "or --metric, every one in --format csv/json.")
    based = tidy[tidy["base"].notna()]
    bases = list(dict.fromkeys(based["base"]))
    if bases:
        out.append(f"Δ: against {', '.join(bases)} (the base of each checkpoint's lineage), same setup only.")
    alone = list(dict.fromkeys(tidy.loc[tidy["base"].isna(), "checkpoint"]))
    if alone:
        out.append(f"No Δ for {', '.join(alone)}: no other checkpoint of its lineage in the table "
                   "(pass --base NAME to compare unrelated checkpoints).")
    sources: dict = {}
    for r in tidy.itertuples():
        sources.setdefault(source_text(r.data, r.split, r.limit), []).append((r.task, r.setup))
    if len(sources) == 1 and next(iter(sources)):
        out.append(f"Every row: {next(iter(sources))}.")
    elif len(sources) > 1:
        for text, where in sources.items():
            names = [t + (f" [{s}]" if s else "") for t, s in dict.fromkeys(where)]
            if text:     # a run that recorded none has nothing to say here
                out.append(f"{', '.join(names)}: {text}.")
    return ([""] + out) if out else []


def source_text(data, split, limit) -> str:
    """"data D, split S, limit N" from a tidy row's source columns (what it has of them; "" for none)."""
    parts = [f"data {data}" if isinstance(data, str) else None,
             f"split {split}" if isinstance(split, str) else None,
             f"limit {int(limit)}" if _num(limit) is not None else None]
    return ", ".join(p for p in parts if p)


def _ci_notes(tidy) -> list[str]:
    """Which deltas' CIs are paired, which combine two CIs, which have none (`store.paired`)."""
    out = []
    if (tidy["delta"].map(_num).notna() & tidy["delta_low"].map(_num).notna()).any():
        out.append("*: the 95% CI of Δ excludes 0. ↑/↓: higher/lower is better; ·: a diagnostic, no direction.")
    if "delta_method" not in tidy.columns:
        return out
    st = tidy.attrs.get("sample_stats") or {}
    has_delta = tidy["delta"].map(_num).notna()
    for method, text in (("paired", "paired bootstrap over the samples both checkpoints answered"
                          + (f" (n_boot {st['n_boot']}, seed {st['seed']})" if st else "")),
                         ("independent", "from the two CIs as if independent (MOVER; no usable per-sample values)"),
                         ("", "none (neither a stored CI nor per-sample values)")):
        keys = list(dict.fromkeys(tidy.loc[has_delta & (tidy["delta_method"] == method), "metric_key"]))
        if keys:
            out.append(f"Δ CI {text}: {', '.join(keys)}.")
    if "per_sample" in tidy.columns:
        for kind, text in (("none declared", "no per-sample form (no sample CI, no paired Δ)"),
                           ("missing", "per-sample values missing from the store (no sample CI, no paired Δ)")):
            keys = list(dict.fromkeys(tidy.loc[tidy["per_sample"] == kind, "metric_key"]))
            if keys:
                out.append(f"{text}: {', '.join(keys)}.")
    if (tidy["metric"] == "model_yes_ratio").any():
        out.append("pope model_yes_ratio: the model's share of \"yes\" answers (lmms-eval's pope_yes_ratio "
                   "counts the ground truth's and is not stored).")
    return out


def _md(s: str) -> str:
    return str(s).replace("|", "\\|")


def _export(tidy):
    out = tidy.drop(columns=["ckpt_id"]).copy()
    out["eval_setup"] = [json.dumps(s, sort_keys=True, default=str) for s in out["eval_setup"]]
    return out


def to_csv(tidy) -> str:
    return _export(tidy).to_csv(index=False)


def to_json(tidy) -> str:
    recs = json.loads(_export(tidy).to_json(orient="records"))
    for r in recs:
        r["eval_setup"] = json.loads(r["eval_setup"])
    bases = list(dict.fromkeys(tidy["base"].dropna()))
    return json.dumps({"base": bases[0] if len(bases) == 1 else None, "bases": bases, "rows": recs}, indent=2)
