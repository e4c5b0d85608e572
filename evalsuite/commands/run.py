"""`evalsuite run`: evaluate one checkpoint on a list of tasks (evalsuite's own and lmms-eval's).

The arguments are read by the one config mechanism (evalsuite/run_config.py), not argparse: argparse
only routes here and prints --help.
"""
from __future__ import annotations

import argparse
import contextlib


def epilog() -> str:
    """--help's field list, generated from EvalConfig's fields and their help metadata (never hand-kept)."""
    from evalsuite.config import help_lines
    from evalsuite.run_config import aliases, eval_config_class

    lines = ["fields (--flag value sets a top-level one, section.key=value a section's; values are read as YAML;",
             "a bare --flag is true for a true/false field and an error for any other):"]
    for line in help_lines(eval_config_class()):
        key = line.split()[0]
        if "." not in key and not key.endswith(":"):   # a top-level field: shown as its flag
            line = line.replace(f"  {key:30s}", f"  {'--' + key.replace('_', '-'):30s}", 1)
        lines.append(line)
    lines.append("convenience flags (set the fields of the sections the run's tasks read):")
    lines += [f"  {'--' + k.replace('_', '-'):30s} sets {', '.join(v)}" for k, v in aliases().items()]
    lines += [f"  {'--judge DIR|URL':30s} sets judge.model (a local model directory) or judge.url (a server)",
              f"  {'--judge-model NAME':30s} sets judge.model (the served model's name, with --judge URL)"]
    lines += ["entry point:",
              f"  {'--config FILE':30s} a YAML eval preset (configs/eval/); flags and key=value override it",
              f"  {'--dry-run':30s} validate, print the resolved config as YAML, exit"]
    return "\n".join(lines)


def register(sub) -> None:
    p = sub.add_parser(
        "run", help="evaluate a checkpoint on tasks (caption, chair, relevance, mme, pope, any lmms-eval task)",
        usage="evalsuite run [--config FILE] --ckpt DIR --tasks A,B (--data-root DIR | --world) "
              "[--flag value ...] [section.key=value ...]",
        description="Evaluate a local checkpoint directory. Writes OUT/run.json, OUT/summary.json and\n"
                    "OUT/<task>/samples.jsonl, and appends every metric to the results store. A task already\n"
                    "in the store for this checkpoint and setup is not run again; a killed run started again\n"
                    "resumes from its last finished batch.",
        epilog=epilog(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(func=main, raw_args=True)


def main(args) -> int:
    import json

    from evalsuite.run_config import load_eval_config

    cfg, own = load_eval_config(args.raw)
    if own.get("dry_run"):
        return dry_run(cfg)
    from evalsuite.dist import Dist, destroy_process_group, init_process_group
    from evalsuite.errors import RunFailure, say
    from evalsuite.run import run_eval

    started = init_process_group(cfg.device)  # under torchrun / accelerate launch (docs/multi-gpu.md)
    try:
        with _stopped_says_how_to_continue(args.raw):
            summary = run_eval(cfg)
        main_rank = Dist.current().is_main
    except RunFailure as exc:
        if not (started and exc.collective):
            raise
        # every rank raised it together: each says its line (evalsuite/cli.py's), then all meet before any
        # exits. torchrun SIGTERMs the ranks left ~0.1-2 s after one exits, which cut a slower rank's line off
        try:
            say(f"evalsuite: failed: {exc}")
        finally:
            Dist.current().barrier()
        return exc.exit_code
    finally:
        if started:
            destroy_process_group()
    if not main_rank:  # rank 0 reports for all
        return 0
    for task, res in summary["tasks"].items():
        metrics = ", ".join(f"{m['metric']}={m['value']:.4g}" for m in res["metrics"])
        print(f"{task:12s} {metrics or '(already in the store: ' + str(res.get('reused')) + ')'}")
    print(json.dumps({"run_id": summary["run_id"], "output_dir": summary["output_dir"]}))
    return 0


@contextlib.contextmanager
def _stopped_says_how_to_continue(raw: list[str]):
    """SIGINT / SIGTERM during a run: one line giving the command that continues it (finished tasks are in
    the store and answers in the resume cache, so the same command picks up where this one stopped), exit
    130 / 143. SIGINT keeps the handler the process has."""
    import shlex

    from evalsuite.interrupts import interrupt_exit

    command = "evalsuite run " + " ".join(shlex.quote(a) for a in raw)
    with interrupt_exit("evalsuite", f" (finished tasks are stored; continue with the same command: {command})",
                        sigint=False):
        yield


def dry_run(cfg) -> int:
    import logging

    from evalsuite.config import print_resolved

    print_resolved(cfg, logging.getLogger("evalsuite.run"))
    return 0
