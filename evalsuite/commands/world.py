"""`evalsuite world build`: write the synthetic COCO-format world (images, COCO json, MME/POPE sets)."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("world", help="build the synthetic COCO-format world",
                       description="Synthetic COCO-format world: PNG glyph images of 12 real COCO "
                                   "categories, instances/captions json, MME and POPE question parquet.")
    wsub = p.add_subparsers(dest="world_command", metavar="ACTION", required=True)
    b = wsub.add_parser("build", help="build a world into --out",
                        description="Build a world into --out (layout: docs/ARCHITECTURE.md). "
                                    "Deterministic by --seed.")
    b.add_argument("--out", required=True, help="output directory (must be empty or absent)")
    b.add_argument("--images", type=int, default=600, help="number of images over both splits (default 600)")
    b.add_argument("--seed", type=int, default=0, help="world seed (default 0)")
    b.add_argument("--val-fraction", type=float, default=0.2,
                   help="fraction of images in the val split (default 0.2)")
    b.add_argument("--overwrite", action="store_true", help="replace an existing world in --out")
    b.set_defaults(func=main)


def main(args) -> int:
    import json

    from evalsuite.world.build import build_world

    out = build_world(args.out, images=args.images, seed=args.seed, val_fraction=args.val_fraction,
                      overwrite=args.overwrite)
    splits = json.loads((out / "world.json").read_text())["splits"]
    for split, c in splits.items():
        print(f"{split:6s} images {c['images']:5d}  objects {c['objects']:5d}  captions {c['captions']:5d}  "
              f"mme rows {c['mme_rows']:5d}  pope rows/setting {c['pope_rows']:5d}")
    print(out)
    return 0
