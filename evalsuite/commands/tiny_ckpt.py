"""`evalsuite tiny-ckpt`: build a tiny offline checkpoint (a VLM of any supported family, or CLIP)."""
from __future__ import annotations


def register(sub) -> None:
    from evalsuite.kit.families import ARCHS  # stdlib-only module: --help stays instant

    p = sub.add_parser("tiny-ckpt", help="build a tiny random-init VLM (any family) or CLIP checkpoint offline",
                       description="Build a tiny, deterministic, real HF checkpoint (save_pretrained, "
                                   "safetensors) that loads with from_pretrained from the directory alone.")
    p.add_argument("--out", required=True, help="output directory (new or empty)")
    p.add_argument("--kind", choices=["vlm", "clip"], default="vlm", help="a VLM (default) or CLIP")
    p.add_argument("--arch", choices=(*ARCHS, "llama_text"), default="llava",
                   help="VLM family (default llava = LLaVA-1.5; --kind vlm only), or llama_text: a text-only Llama "
                        "vLLM serves (a tiny judge, docs/judge.md)")
    p.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    p.add_argument("--reply", default=None,
                   help="llama_text only: a scripted judge whose greedy reply to any chat is this text (set weights, "
                        "not random: judged tasks store results offline; evalsuite/kit/text_llm.py)")
    p.add_argument("--vllm-compatible", action="store_true",
                   help="a VLM that vLLM also runs (text heads of 32, llava-hf weight names; docs/engines.md)")
    p.set_defaults(func=main)


def main(args) -> int:
    from evalsuite.errors import UserError
    from evalsuite.kit.families import build_tiny_family
    from evalsuite.kit.tiny import build_tiny_clip
    from evalsuite.ownership import refuse_nonempty

    refuse_nonempty(args.out, "--out")  # a checkpoint is a whole folder: never written over another
    if args.reply is not None and args.arch != "llama_text":
        raise UserError("--reply: only with --arch llama_text")
    if args.kind == "clip":
        if args.arch != "llava":
            raise UserError("--arch: only for --kind vlm")
        if args.vllm_compatible:
            raise UserError("--vllm-compatible: only for --kind vlm")
        out = build_tiny_clip(args.out, seed=args.seed)
    elif args.arch == "llama_text":
        from evalsuite.kit.text_llm import build_tiny_llama_text

        out = build_tiny_llama_text(args.out, seed=args.seed, reply=args.reply)
    else:
        out = build_tiny_family(args.arch, args.out, seed=args.seed, vllm_compatible=args.vllm_compatible)
    print(out)
    return 0
