"""`evalsuite run`: evaluate one checkpoint on a list of tasks (evalsuite's own and lmms-eval's)."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser(
        "run", help="evaluate a checkpoint on tasks (caption, chair, relevance, mme, pope, any lmms-eval task)",
        description="Evaluate a local checkpoint directory. Writes OUT/run.json, OUT/summary.json and "
                    "OUT/<task>/samples.jsonl, and appends every metric to the results store.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--ckpt", required=True, help="local HF checkpoint directory (config.json + safetensors)")
    p.add_argument("--tasks", required=True, help="comma-separated task names, e.g. chair,mme,pope,relevance")
    p.add_argument("--data-root", default=None,
                   help="COCO-format folder (images + annotations[, questions]), e.g. one written by "
                        "`evalsuite world build` or real COCO; default: the built-in synthetic world")
    p.add_argument("--output", default=None, help="output directory (default: STORE/runs/RUN_ID)")
    p.add_argument("--store", default="results", help="results store directory")
    p.add_argument("--limit", type=int, default=None, help="at most N documents per task")
    p.add_argument("--batch-size", type=int, default=8, help="generation batch size")
    p.add_argument("--max-new-tokens", type=int, default=512, help="generation length cap (own tasks)")
    p.add_argument("--gen-kwargs", default=None,
                   help="lmms-eval generation overrides, e.g. 'max_new_tokens=16,temperature=0'")
    p.add_argument("--split", default="val", help="COCO split of --data-root for caption/chair (val, val2014...)")
    p.add_argument("--prompt", default=None, help="caption/chair prompt (default: 'Please describe this image in detail.')")
    p.add_argument("--chair-images", type=int, default=500, help="images sampled (seed --seed) for chair")
    p.add_argument("--variant", default="original", help="CHAIR variant: original | opera | opera_lemma")
    p.add_argument("--clip", default=None, help="local CLIP checkpoint dir for the relevance task")
    p.add_argument("--seed", type=int, default=0, help="sampling seed for image subsets and generation")
    p.add_argument("--label", default=None, help="display name of this checkpoint in tables and reports")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow custom model code in the checkpoint")
    p.add_argument("--system-prompt", default=None,
                   help="system message before every prompt (default: none beyond the chat template's own)")
    p.add_argument("--chat-template", default=None, metavar="FILE",
                   help="Jinja chat template file used instead of the checkpoint's (needed when it has none)")
    p.add_argument("--image-aspect", choices=["crop", "pad"], default="crop",
                   help="crop: the processor's own resizing; pad: pad to a square with the image mean "
                        "colour first (LLaVA-1.5's image_aspect_ratio=pad)")
    p.set_defaults(func=main)


def main(args) -> int:
    import json

    from evalsuite.run import EvalSpec, run_eval
    from evalsuite.types import GenConfig

    options = {"split": args.split, "variant": args.variant, "clip": args.clip,
               "n_images": args.chair_images, "seed": args.seed, "gen_kwargs": args.gen_kwargs}
    if args.prompt:
        options["prompt"] = args.prompt
    spec = EvalSpec(
        ckpt=args.ckpt, tasks=[t.strip() for t in args.tasks.split(",") if t.strip()],
        data_root=args.data_root, output_dir=args.output, store=args.store, limit=args.limit,
        batch_size=args.batch_size, gen=GenConfig(max_new_tokens=args.max_new_tokens, seed=args.seed),
        options={k: v for k, v in options.items() if v is not None},
        trust_remote_code=args.trust_remote_code, device=args.device, label=args.label,
        system_prompt=args.system_prompt, chat_template=args.chat_template, image_aspect=args.image_aspect,
    )
    summary = run_eval(spec)
    for task, res in summary["tasks"].items():
        metrics = ", ".join(f"{m['metric']}={m['value']:.4g}" for m in res["metrics"])
        print(f"{task:12s} {metrics}")
    print(json.dumps({"run_id": summary["run_id"], "output_dir": summary["output_dir"]}))
    return 0
