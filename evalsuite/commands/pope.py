"""`evalsuite pope build`: POPE question sets (random / popular / adversarial) from COCO instances."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("pope", help="build POPE question sets from COCO instances",
                       description="POPE (Li et al. 2023): per image 3 present + 3 absent categories, "
                                   "absent ones sampled random / popular / adversarial.")
    psub = p.add_subparsers(dest="pope_command", metavar="ACTION", required=True)
    b = psub.add_parser("build", help="write pope_{split}_{setting}.json (+ .parquet when images exist)",
                        description="Reads COCO/annotations/instances_{split}.json (or --instances) and, "
                                    "when the split's images are there, writes lmms-eval POPE parquet too.")
    b.add_argument("--coco", default=None,
                   help="COCO-format root (a world dir or a COCO 2014 root); optional with --instances")
    b.add_argument("--split", default="val2014", help="split name: val2014, train2014, val, train (default val2014)")
    b.add_argument("--out", required=True, help="output directory (its pope_SPLIT_*.json/.parquet are replaced only when "
                   "`pope build` wrote them)")
    b.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    b.add_argument("--images", type=int, default=None,
                   help="sample this many eligible images (default all; the POPE paper uses 500)")
    b.add_argument("--instances", default=None, help="instances json to use instead of the layout's")
    b.add_argument("--image-dir", default=None, help="image directory to use instead of the layout's")
    b.set_defaults(func=main)


def main(args) -> int:
    import json

    from pathlib import Path

    from evalsuite.errors import UserError
    from evalsuite.files import ensure_writable_dir
    from evalsuite.ownership import looks_like_pope, refuse_foreign
    from evalsuite.world.pope import SETTINGS, build_pope

    if args.coco is None and args.instances is None:
        raise UserError("pope build: give --coco DIR (with annotations/instances_SPLIT.json) or --instances FILE")
    ensure_writable_dir(args.out, "--out", create=False)
    for setting in SETTINGS:  # an earlier `pope build` output is replaced; a file of the user's never is
        for ext in (".json", ".parquet"):
            refuse_foreign(Path(args.out) / f"pope_{args.split}_{setting}{ext}", "--out", looks_like_pope)
    written = build_pope(args.coco, args.split, args.out, seed=args.seed, n_images=args.images,
                         instances=args.instances, image_dir=args.image_dir)
    for setting, path in written["json"].items():
        n = len(json.loads(path.read_text()))
        parquet = written["parquet"].get(setting)
        print(f"{setting:12s} {n:6d} questions  {path}" + (f"  {parquet}" if parquet else "  (no images: json only)"))
    return 0
