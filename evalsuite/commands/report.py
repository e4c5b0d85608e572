"""`evalsuite report`: the results store -> reports/NAME/index.html, one self-contained file.

    evalsuite report --store results --out reports/csr-run1
    evalsuite report --store results --version 4 --out reports/before-iter3
"""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser(
        "report", help="write a self-contained HTML report from the results store",
        description="Summary table with deltas vs base, metrics across iterations, chosen vs rejected "
                    "rewards per CSR iteration, relevance densities, a per-sample view with marked "
                    "hallucinations, and provenance: all in OUT/index.html (no network needed to view).")
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
    p.add_argument("--page-size", type=int, default=8, help="sample groups per page (default 8)")
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
    if args.max_images < 0 or args.page_size < 1:
        raise UserError("--max-images must be >= 0 and --page-size >= 1")
    ensure_writable_dir(args.out, "--out", create=False)
    path = build_report(store, args.out, as_of=args.as_of, runs=args.run, base=args.base, max_images=args.max_images,
                        page_size=args.page_size, image_roots=args.image_root, title=args.title)
    print(path)
    return 0
