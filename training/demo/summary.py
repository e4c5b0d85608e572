"""The demo's closing table and its check against the ranges a fresh clone is expected to land in.

    python -m training.demo.summary --store runs/demo/results --config configs/demo.yaml

One row per checkpoint of the demo store (base = iteration 0, then every CSR iteration): CHAIR_s and
CHAIR_i with their 95% CIs, Recall, POPE accuracy, MME perception, and the reward gap of the CSR pairs
that checkpoint generated (the pairs that train the next iteration). `check` compares the base and the
last iteration with the preset's `expect:` ranges (measured over seeds 0-2 x 1-2 threads, README) and
the robustness condition the demo exists to show: the last iteration's CHAIR_i CI lies wholly below
the base's. Exit code 1 when anything is outside.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

# (column, task, metric): what the table shows, in order
COLUMNS = [
    ("CHAIR_s", "chair", "CHAIRs"), ("CHAIR_i", "chair", "CHAIRi"), ("Recall", "chair", "Recall"),
    ("POPE acc", "pope", "pope_accuracy"), ("MME perc", "mme", "mme_perception_score"),
    ("reward gap", "csr_pairs", "reward_gap"),
]
WITH_CI = {"CHAIR_s", "CHAIR_i"}


def summary_rows(store: str | Path) -> list[dict]:
    """[{iteration, name, <column>: (value, ci_low, ci_high)}] ordered by iteration (the latest row of each)."""
    from evalsuite.store import Store

    df = Store(store).snapshot().metrics()
    df = df[df["iteration"].notna()].sort_values("written_at", kind="stable")
    rows = []
    for it, g in df.groupby("iteration", sort=True):
        label = g[g["task"] != "csr_pairs"]["label"].dropna()
        row = {"iteration": int(it), "name": label.iloc[-1] if len(label) else f"iter_{int(it)}"}
        for col, task, metric in COLUMNS:
            hit = g[(g["task"] == task) & (g["metric"] == metric)]
            # POPE: the whole set's row, not a setting's (random/popular/adversarial carry a variant); CHAIR
            # names its one variant on every row
            whole = hit[hit["variant"].isna()]
            hit = whole if len(whole) else hit
            if len(hit):
                r = hit.iloc[-1]
                row[col] = (float(r["value"]), _num(r["ci_low"]), _num(r["ci_high"]))
        rows.append(row)
    return rows


def _num(x) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def format_rows(rows: list[dict]) -> str:
    head = ["checkpoint"] + [c for c, _, _ in COLUMNS]
    lines = []
    for r in rows:
        cells = [r["name"]]
        for col, _, _ in COLUMNS:
            v = r.get(col)
            if v is None:
                cells.append("-")
            elif col in WITH_CI and v[1] is not None:
                cells.append(f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]")
            else:
                cells.append(f"{v[0]:.1f}" if abs(v[0]) >= 10 else f"{v[0]:.3f}")
        lines.append(cells)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*head), fmt.format(*["-" * w for w in widths]), *(fmt.format(*c) for c in lines)])


def check(rows: list[dict], expect: dict[str, list[float]]) -> list[tuple[str, str, bool]]:
    """[(what, observed, ok)]: each `expect` range ("base.POPE acc": [lo, hi], "last.CHAIR_i": ...) and
    the CHAIR_i CIs of base and last iteration not overlapping (last below base)."""
    out = []
    if not rows:
        return [("rows", "the store holds no demo checkpoints", False)]
    where = {"base": rows[0], "last": rows[-1]}
    for key, (lo, hi) in expect.items():
        which, _, col = key.partition(".")
        v = where.get(which, {}).get(col)
        if v is None:
            out.append((key, "missing", False))
        else:
            out.append((f"{key} in [{lo}, {hi}]", f"{v[0]:.4g}", lo <= v[0] <= hi))
    b, last = where["base"].get("CHAIR_i"), where["last"].get("CHAIR_i")
    if b and last and None not in (b[1], last[2]) and len(rows) > 1:
        out.append(("CHAIR_i CI of the last iteration below the base's", f"{last[2]:.4f} < {b[1]:.4f}", last[2] < b[1]))
    else:
        out.append(("CHAIR_i CI of the last iteration below the base's", "no CIs", False))
    return out


def report(store: str | Path, expect: dict[str, list[float]]) -> tuple[str, bool]:
    rows = summary_rows(store)
    results = check(rows, expect)
    head = ("check against the preset's expect: ranges:" if expect else
            "check (the preset states no expect: ranges; only the CHAIR_i condition is checked):")
    text = [format_rows(rows), "", head]
    text += [f"  {'ok  ' if ok else 'OUT '} {what}: {seen}" for what, seen, ok in results]
    return "\n".join(text), all(ok for _, _, ok in results)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.demo.summary", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default="runs/demo/results", help="the demo's results store")
    p.add_argument("--config", default="configs/demo.yaml", help="the demo preset whose `expect:` ranges apply")
    args = p.parse_args(argv)
    from evalsuite.errors import UserError

    try:
        from training.demo import DemoConfig

        text, ok = report(args.store, DemoConfig.from_yaml(args.config).expect)
    except UserError as e:
        print(f"summary: error: {e}", file=sys.stderr)
        return 2
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
