"""`evalsuite chair-gt build|import`: write a CHAIR ground-truth JSON cache.

    evalsuite chair-gt build --coco /data/coco --normalizer pattern --out gt_pattern.json.gz
    evalsuite chair-gt build --instances a.json --captions b.json --out gt.json.gz
    evalsuite chair-gt import --pkl chair.pkl --normalizer nltk_lemma --out gt_lemma.json.gz

`build` unions instance categories with the categories CHAIR finds in the reference captions
(either normaliser). `import` reads a `chair.pkl` through a restricted unpickler (no code runs).
"""
from __future__ import annotations

import argparse
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("chair-gt", help="build or import a CHAIR ground-truth cache",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    gsub = p.add_subparsers(dest="chair_gt_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    b = gsub.add_parser("build", help="build GT from COCO instances + captions json")
    b.add_argument("--coco", type=Path, default=None, help="COCO folder (annotations/instances_*.json, captions_*.json)")
    b.add_argument("--instances", type=Path, nargs="*", default=[], help="instances json file(s)")
    b.add_argument("--captions", type=Path, nargs="*", default=[], help="captions json file(s)")
    b.add_argument("--normalizer", default="pattern", help="pattern (original) or nltk_lemma (opera_lemma)")
    b.add_argument("--nltk-data", default=None, help="NLTK data folder (else NLTK_DATA)")
    b.add_argument("--out", required=True, type=Path, help="output cache (.json or .json.gz)")
    b.set_defaults(func=main)
    i = gsub.add_parser("import", help="convert a chair.pkl cache to JSON (restricted unpickler)")
    i.add_argument("--pkl", required=True, type=Path, help="chair.pkl from a hallucination repo")
    i.add_argument("--normalizer", default="unknown", help="how that cache was built: pattern | nltk_lemma")
    i.add_argument("--out", required=True, type=Path, help="output cache (.json or .json.gz)")
    i.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from evalsuite.errors import UserError
    from evalsuite.metrics import chair_gt, chair_io, nltk_resources

    if args.chair_gt_command == "import":
        objects = chair_gt.import_chair_pkl(args.pkl)
        chair_gt.save_gt(args.out, objects, args.normalizer, source=str(args.pkl))
    else:
        if args.normalizer not in ("pattern", "nltk_lemma"):
            raise UserError(f"--normalizer: unknown {args.normalizer!r} (pattern or nltk_lemma)")
        inst, caps = list(args.instances), list(args.captions)
        if args.coco is not None:
            more_inst, more_caps = chair_io.coco_annotation_files(args.coco)
            inst, caps = inst + more_inst, caps + more_caps
        if not inst or not caps:
            raise UserError("chair-gt build: give --coco DIR or both --instances and --captions")
        nltk_resources.add_data_dir(args.nltk_data)
        objects = chair_gt.build_gt(inst, caps, args.normalizer, progress=True)
        chair_gt.save_gt(args.out, objects, args.normalizer, source=", ".join(map(str, inst + caps)))
    n_empty = sum(1 for v in objects.values() if not v)
    print(f"{len(objects)} images ({n_empty} with no objects) -> {args.out}")
    return 0
