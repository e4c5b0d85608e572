"""Labels for evaluation setups: what differs between the `eval_setup`s of one task.

Rows are comparable only within one `eval_key` (see `evalsuite.types.eval_key`). When a task was
evaluated several ways in one table, each way is labelled by the identity fields that differ, e.g.
`prompt='A'` vs `prompt='B'`, or `n_images=4` vs `n_images=8`. Short scalar fields name a setup best;
long values (document id lists, fingerprints) are shown abbreviated, and only when no short field
tells the setups apart.
"""
from __future__ import annotations

import json

from evalsuite.safeio import loads_json

_MISSING = object()
MAX_FIELDS = 3
MAX_VALUE = 40


def flatten(d: dict, prefix: str = "") -> dict:
    """{"gen": {"max_new_tokens": 8}} -> {"gen.max_new_tokens": 8}; lists stay whole."""
    out: dict = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, name + "."))
        else:
            out[name] = v
    return out


def parse_setup(text) -> dict:
    """An `eval_setup` cell (JSON text) as a dict; anything unreadable is an empty setup."""
    if not isinstance(text, str) or not text:
        return {}
    try:
        value = loads_json(text, "eval_setup")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _short(v) -> str | None:
    """repr of a short scalar, else None."""
    if v is _MISSING:
        return "–"
    if v is None or isinstance(v, (bool, int, float)):
        return repr(v)
    if isinstance(v, str):
        return repr(v if len(v) <= MAX_VALUE else v[: MAX_VALUE - 1] + "…")
    return None


def _long(v) -> str:
    from evalsuite.identity import digest as canonical_digest

    digest = canonical_digest(v, 6)
    if isinstance(v, (list, tuple)):
        return f"[{len(v)} items #{digest}]"
    return f"#{digest}"


def label_setups(setups: dict[str, dict]) -> dict[str, str]:
    """{eval_key: setup dict} of one task -> {eval_key: label}; "" for all when there is only one."""
    if len(setups) < 2:
        return {k: "" for k in setups}
    flat = {k: flatten(s) for k, s in setups.items()}
    fields = list(dict.fromkeys(f for s in flat.values() for f in s))
    differ = [f for f in fields
              if len({json.dumps(s.get(f, "\0missing"), sort_keys=True, default=str) for s in flat.values()}) > 1]
    short = [f for f in differ if all(_short(s.get(f, _MISSING)) is not None for s in flat.values())]
    shown = (short or differ)[:MAX_FIELDS]
    labels = {}
    for k, s in flat.items():
        parts = []
        for f in shown:
            v = s.get(f, _MISSING)
            parts.append(f"{f}={_short(v) if _short(v) is not None else _long(v)}")
        labels[k] = ", ".join(parts) or f"setup {k[:8]}"
    counts: dict[str, int] = {}
    for lab in labels.values():
        counts[lab] = counts.get(lab, 0) + 1
    return {k: lab if counts[lab] == 1 else f"{lab} #{k[:6]}" for k, lab in labels.items()}


def task_labels(df) -> dict[tuple[str, str], str]:
    """(task, eval_key) -> label, over the rows of `df` (columns task, task_version, eval_key, eval_setup).

    The task version is part of what is compared, so a setup that differs only there is labelled by it."""
    out: dict[tuple[str, str], str] = {}
    firsts = df.drop_duplicates(["task", "eval_key"])
    for task, g in firsts.groupby("task", sort=False):
        setups = {k: {"task_version": v, **parse_setup(s)}
                  for k, v, s in zip(g["eval_key"], g["task_version"], g["eval_setup"])}
        for k, lab in label_setups(setups).items():
            out[(task, k)] = lab
    return out
