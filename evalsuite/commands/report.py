"""`evalsuite report`: the results store -> reports/NAME/index.html, one self-contained file.

    evalsuite report --store results --out reports/csr-run1
    evalsuite report --store results --version 4 --out reports/before-iter3
"""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser(
        "report", help="write a self-contained HTML report from the results store",
        description="A headline (base vs last iteration, which changes are significant), a summary table "
                    "with deltas vs base and paired-bootstrap CIs (the numbers `evalsuite table` prints), "
                    "metrics across iterations, chosen vs rejected rewards and DPO training curves per CSR "
                    "iteration, relevance densities, caption and question (POPE/MME) browsers with "
                    "filters and search, and provenance: all in OUT/index.html (no network needed to view).")
    p.add_argument("--store", default="results", help="results store directory (default: results)")
    p.add_argument("--out", default="reports/latest", help="output folder (default: reports/latest)")
    p.add_argument("--version", dest="as_of", metavar="V",
                   help="report the store as of version V (number, negative from the latest, or run id)")
    p.add_argument("--run", action="append", metavar="RUN_ID", help="only these runs; repeatable")
    p.add_argument("--base", metavar="CKPT",
                   help="take every delta against this checkpoint (name, path or hash prefix); default: "
                        "the iteration-0 checkpoint of each lineage")
    p.add_argument("--max-images", type=int, default=120,
                   help="image/prompt groups in the per-sample view (default 120; bounds the file size)")
    p.add_argument("--ckpt", action="append", default=[], metavar="NAME",
                   help="a checkpoint the caption and question browsers show (name, path or hash prefix); "
                        "repeatable")
    p.add_argument("--max-ckpts", type=int, default=6,
                   help="checkpoints side by side in the browsers (default 6): the --ckpt ones, then each "
                        "lineage's base and latest; the summary and `evalsuite table` keep every one")
    p.add_argument("--page-size", type=int, default=8, help="sample groups per page (default 8)")
    p.add_argument("--max-questions", type=int, default=400,
                   help="questions (POPE, MME) in the question browser (default 400, changed answers first)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for CIs (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--image-root", action="append", default=[], metavar="DIR",
                   help="folder relative sample image paths are resolved against; repeatable")
    p.add_argument("--title", help="page title")
    p.set_defaults(func=main)


def main(args) -> int:
    from evalsuite.errors import UserError
    from evalsuite.files import ensure_writable_dir
    from evalsuite.report import build_report
    from evalsuite.store import Store

    store = Store(args.store)
    if not store.metrics_dir.is_dir():
        raise UserError(f"--store {args.store}: no results store there (no metrics/ folder)")
    if args.max_images < 0 or args.page_size < 1 or args.max_questions < 0:
        raise UserError("--max-images and --max-questions must be >= 0 and --page-size >= 1")
    if args.max_ckpts < 1:
        raise UserError(f"--max-ckpts: must be >= 1, got {args.max_ckpts}")
    if args.n_boot < 1:
        raise UserError(f"--n-boot: must be >= 1, got {args.n_boot}")
    ensure_writable_dir(args.out, "--out", create=False)
    from pathlib import Path

    from evalsuite.ownership import looks_like_report, refuse_foreign

    refuse_foreign(Path(args.out) / "index.html", "--out", looks_like_report)   # never a user's own page
    path = build_report(store, args.out, as_of=args.as_of, runs=args.run, base=args.base, max_images=args.max_images,
                        page_size=args.page_size, image_roots=args.image_root, title=args.title,
                        max_questions=args.max_questions, n_boot=args.n_boot, seed=args.seed, ckpts=args.ckpt,
                        max_ckpts=args.max_ckpts)
    print(path)
    return 0
