"""`evalsuite tasks`: list the registered task names and what each needs (no heavy imports).

A task's needs come from the registry, never from a list kept here: `--data-root` when it reads it (an
own task's `reads_data_root`, default True; every lmms-eval local task), its Options fields declared
`required` (`section.field`, with the field's convenience flag), and `judge` when it reads the
`judge:` section (`uses_judge`). The README's task table is checked against `needs` (tests/unit).
"""
from __future__ import annotations

JUDGE = "judge"
DATA_ROOT = "--data-root"


def register(sub) -> None:
    p = sub.add_parser("tasks", help="list the available tasks and what each needs",
                       description="List evalsuite's own tasks and the lmms-eval tasks shipped with local-data "
                                   "yamls, each with what a run of it needs: --data-root, its required options "
                                   "(section.field) and a judge (--judge; docs/judge.md). Any other lmms-eval "
                                   "task name is also accepted by `run`.")
    p.add_argument("--format", choices=["text", "json"], default="text",
                   help="text (default): one line per task; json: [{name, kind, target, needs}]")
    p.set_defaults(func=main)


def required_fields(name: str) -> list[str]:
    """`section.field` (and its flag, `--alias`) of every Options field own task `name` declares `required`
    (the fields a run of it is refused without: evalsuite/tasks/registry.py `check_required`)."""
    from evalsuite.tasks.registry import required_options, section_of

    out = []
    for f in required_options(name):
        alias = f.metadata.get("alias")
        out.append(f"{section_of(name)}.{f.name}" + (f" (--{alias.replace('_', '-')})" if alias else ""))
    return out


def needs(name: str) -> list[str]:
    """What a run of task `name` needs (module doc), in the order: --data-root, options, judge."""
    from evalsuite.tasks.registry import LMMS_LOCAL_TASKS, task_class

    if name in LMMS_LOCAL_TASKS:
        local = LMMS_LOCAL_TASKS[name]
        return [DATA_ROOT] + ([JUDGE] if getattr(local, "uses_judge", False) else [])
    cls = task_class(name)
    out = [DATA_ROOT] if getattr(cls, "reads_data_root", True) else []
    out += required_fields(name)
    return out + ([JUDGE] if getattr(cls, "uses_judge", False) else [])


def listing() -> list[dict]:
    """Every listed task: {name, kind ("evalsuite" | "lmms-eval"), target, about, needs}."""
    from evalsuite.tasks.registry import LMMS_LOCAL_TASKS, TASKS

    out = [{"name": n, "kind": "evalsuite", "target": t, "about": "", "needs": needs(n)} for n, t in TASKS.items()]
    out += [{"name": n, "kind": "lmms-eval", "target": local.lmms_task, "about": local.about, "needs": needs(n)}
            for n, local in LMMS_LOCAL_TASKS.items()]
    return out


def main(args) -> int:
    import json

    from evalsuite.lmms import YAML_DIR

    rows = listing()
    if getattr(args, "format", "text") == "json":
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        what = r["target"] if r["kind"] == "evalsuite" else f"{r['target']}: {r['about']}"
        print(f"{r['name']:12s} {r['kind']:10s} needs: {', '.join(r['needs']) or 'nothing'}  ({what})")
    print(f"({JUDGE}: --judge MODEL_DIR (served locally with vLLM) or --judge URL --judge-model NAME; docs/judge.md. "
          "section.field: pass as section.field=VALUE)")
    print("(any other lmms-eval task, group or tag runs through lmms-eval's evaluator; map its data with "
          "lmms.data.<task> in the eval config)")
    print(f"yamls for `lmms-eval --include_path`: {YAML_DIR}")
    return 0
