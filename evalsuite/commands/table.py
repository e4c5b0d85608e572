"""`evalsuite table`: checkpoints x metrics from the results store, with delta vs base and CIs.

    evalsuite table --store results                      # headline metrics, markdown
    evalsuite table --store results --all                # every metric
    evalsuite table --store results --metric 'chair/*' --format md
    evalsuite table --store results --list-versions      # the store's writes, numbered
    evalsuite table --store results --version 3          # the table as it was after write 3
    evalsuite table --store results --base llava-1.5-7b  # deltas of every checkpoint vs this one
    evalsuite table --store results --by object --task chair --top 10   # objects whose rate changed most
"""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser(
        "table", help="print checkpoints x metrics from the results store",
        description="Checkpoints (rows, ordered by iteration) x metrics (columns): the latest value per "
                    "checkpoint and evaluation setup with its CI, and the difference to the base checkpoint "
                    "of the same setup with a CI. A checkpoint evaluated two ways (prompt, images, data...) "
                    "gives two rows labelled by what differs. The base is chosen per lineage (checkpoints "
                    "linked by their manifests' parent): its iteration 0, else its first; unrelated "
                    "checkpoints get no delta unless --base names one. Metrics are named TASK/METRIC[VARIANT]. "
                    "Where both checkpoints' per-sample records exist, CIs come from a paired bootstrap over "
                    "the shared samples (the report uses the same numbers); the notes say which.")
    p.add_argument("--store", default="results", help="results store directory (default: results)")
    p.add_argument("--metric", action="append", metavar="M",
                   help="metric to show: TASK/METRIC, METRIC or a glob ('chair/*'); repeatable")
    p.add_argument("--format", choices=["md", "csv", "json"], default="md",
                   help="md (default): the headline metrics only (each task's lead metric, as the report's "
                        "summary leads with; --all for every metric); csv and json: every metric")
    p.add_argument("--all", action="store_true", help="md: every metric, not only the headline ones")
    p.add_argument("--version", dest="as_of", metavar="V",
                   help="show the table as of store version V (a number from --list-versions, negative "
                        "counts back from the latest, or a run id)")
    p.add_argument("--run", action="append", metavar="RUN_ID", help="only these runs; repeatable")
    p.add_argument("--base", metavar="CKPT",
                   help="take every delta against this checkpoint (its name in the table, path or hash prefix); "
                        "with --by object: the base of the comparison")
    p.add_argument("--list-versions", action="store_true", help="list the store's writes and exit")
    p.add_argument("--no-samples", dest="samples", action="store_false",
                   help="do not read per-sample records: stored CIs only, deltas from the two CIs (faster)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    add_object_args(p)
    p.set_defaults(func=main)


def add_object_args(p) -> None:
    """`--by object` and its options (evalsuite/store/objects.py)."""
    p.add_argument("--by", choices=["checkpoint", "object"], default="checkpoint",
                   help="object: per object, the hallucination rate of the lineage's base and of a later "
                        "checkpoint, and the objects whose rate changed most, with paired CIs over images")
    p.add_argument("--task", help="--by object: the task whose per-object records to read (e.g. chair)")
    p.add_argument("--variant", help="--by object: only this variant of the task (e.g. opera)")
    p.add_argument("--vs", metavar="CKPT", help="--by object: the later checkpoint (default: the lineage's latest)")
    p.add_argument("--top", type=int, help="--by object: the N objects whose rate changed most (default 10)")


def object_table(args, snap) -> int:
    """`--by object`: the per-object comparison(s) as md or csv."""
    from evalsuite.errors import UserError
    from evalsuite.store import objects

    if args.format == "json":
        raise UserError("--format json: --by object writes md or csv")
    for flag, bad in (("--metric", args.metric), ("--list-versions", args.list_versions),
                      ("--no-samples", not args.samples)):
        if bad:
            raise UserError(f"{flag}: has no effect with --by object (it reads the per-sample records)")
    top = 10 if args.top is None else args.top
    if top < 1:
        raise UserError(f"--top: must be >= 1, got {top}")
    comps = objects.compare_store(snap, task=args.task, variant=args.variant, base=args.base, vs=args.vs,
                                  as_of=args.as_of, runs=args.run, n_boot=args.n_boot, seed=args.seed)
    if not comps:
        which = f"{args.base or 'the base'} and {args.vs or 'a later checkpoint'}" if args.base or args.vs \
            else "two checkpoints of one lineage"
        raise UserError(f"--by object: no per-object records of {which} in one setup"
                        f"{f' of {args.task}' if args.task else ''}; pass --base and --vs to pick two")
    print((objects.to_markdown if args.format == "md" else objects.to_csv)(comps, top).rstrip("\n"))
    return 0


def main(args) -> int:
    import sys

    from evalsuite.bidi import visible
    from evalsuite.errors import UserError
    from evalsuite.store import Store
    from evalsuite.store.compare import compare
    from evalsuite.store.table import headline_keys, to_csv, to_json, to_markdown

    if args.n_boot < 1:
        raise UserError(f"--n-boot: must be >= 1, got {args.n_boot}")
    if args.all and args.metric:
        raise UserError("--all and --metric: pick one (--all shows every metric, --metric the ones named)")
    store = Store(args.store)
    if not store.metrics_dir.is_dir():
        raise UserError(f"--store {args.store}: no results store there (no metrics/ folder)")
    by_object = getattr(args, "by", "checkpoint") == "object"
    if not by_object:
        for flag in ("task", "variant", "vs", "top"):
            if getattr(args, flag, None) is not None:
                raise UserError(f"--{flag}: only with --by object")
    snap = store.snapshot()
    if by_object:
        return object_table(args, snap)
    if args.list_versions:
        runs = snap.runs()
        if runs.empty:
            print(f"no runs in {args.store}")
            return 0
        cols = ["version", "run_id", "written_at", "iteration", "method", "ckpt", "tasks"]
        print(visible(runs[cols].to_string(index=False)))
        return 0
    headline = args.format == "md" and not (args.all or args.metric)
    tidy = compare(snap, args.base, args.n_boot, args.seed, metrics=args.metric, as_of=args.as_of,
                   runs=args.run, samples=args.samples, select=headline_keys if headline else None).tidy
    text = {"md": to_markdown, "csv": to_csv, "json": to_json}[args.format](tidy).rstrip("\n")
    # bidi / zero-width controls of names and labels written out visibly for a reader (json escapes them
    # itself); csv redirected to a file keeps the data as stored
    print(visible(text) if args.format == "md" or sys.stdout.isatty() else text)
    return 0
