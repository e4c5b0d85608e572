"""`evalsuite tiny-ckpt`: build a tiny offline checkpoint (LLaVA or CLIP) for tests and demos."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("tiny-ckpt", help="build a tiny random-init LLaVA or CLIP checkpoint offline",
                       description="Build a tiny, deterministic, real HF checkpoint (save_pretrained, "
                                   "safetensors) that loads with from_pretrained from the directory alone.")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--kind", choices=["vlm", "clip"], default="vlm", help="LLaVA VLM (default) or CLIP")
    p.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    p.set_defaults(func=main)


def main(args) -> int:
    from evalsuite.kit.tiny import build_tiny_clip, build_tiny_vlm

    build = build_tiny_vlm if args.kind == "vlm" else build_tiny_clip
    out = build(args.out, seed=args.seed)
    print(out)
    return 0
