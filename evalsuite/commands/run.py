"""`evalsuite run`: evaluate one checkpoint on a list of tasks (evalsuite's own and lmms-eval's).

The arguments are read by the one config mechanism (evalsuite/run_config.py), not argparse: argparse
only routes here and prints --help.
"""
from __future__ import annotations

import argparse

EPILOG = """\
flags (each sets the eval config field of the same name; values are read as YAML):
  --ckpt DIR              local HF checkpoint directory (config.json + safetensors)       [required]
  --tasks A,B             task names, e.g. caption,chair,relevance,mme,pope                [required]
  --data-root DIR         COCO-format folder (images + annotations[, questions]): real COCO or
                          one written by `evalsuite world build`
  --world                 use the built-in synthetic world instead (opt-in; one of the two is required)
  --output DIR            output directory (default STORE/runs/RUN_ID); an existing one is resumed
                          if it holds this same run, refused otherwise
  --store DIR             results store (default results)
  --limit N               at most N documents per task (N >= 1)
  --batch-size N          generation batch size (default 8)
  --device D              cpu | cuda | cuda:N | mps (default: cuda if available)
  --dtype T               float32 | bfloat16 | float16 (default: bfloat16 on cuda, else float32)
  --seed N                generation seed, chair's image sample seed, and lmms-eval's four seeds
                          (python, numpy, torch, few-shot; as `lmms-eval --seed N`) (default 0)
  --label NAME            display name of this checkpoint in tables and reports
  --trust-remote-code     allow custom model code in the checkpoint
  --rerun                 score and store tasks (own and lmms-eval) already in the store for this
                          checkpoint and setup
                          (answers still come from STORE/.resume where finished)
  --system-prompt TEXT, --chat-template FILE, --image-aspect crop|pad    prompt settings
  --engine hf|vllm        what generates: transformers (default) or a vLLM worker in its own
                          environment (`make vllm-env`; vllm.* options; docs/engines.md)
convenience flags (set typed fields of the sections the run's tasks read):
  --split S               caption.split, chair.split, lmms.split (default val)
  --prompt TEXT           caption.prompt, chair.prompt
  --chair-images N        chair.n_images (default 500)
  --variant V             chair.variant: original | opera | opera_lemma
  --clip DIR              relevance.clip: local CLIP checkpoint dir
  --max-new-tokens N      gen.max_new_tokens of the own tasks (default 512)
  --gen-kwargs K=V,...    lmms.gen_kwargs: lmms-eval generation overrides (max_new_tokens, temperature,
                          top_p, num_beams, do_sample, seed, until)
nested options: section.key=value, e.g. chair.n_boot=200 gen.num_beams=3 lmms.data.mme=/data/mme.parquet
  --config FILE           a YAML eval preset (configs/eval/); flags and key=value override it
  --dry-run               validate, print the resolved config as YAML, exit
"""


def register(sub) -> None:
    p = sub.add_parser(
        "run", help="evaluate a checkpoint on tasks (caption, chair, relevance, mme, pope, any lmms-eval task)",
        usage="evalsuite run [--config FILE] --ckpt DIR --tasks A,B (--data-root DIR | --world) "
              "[--flag value ...] [section.key=value ...]",
        description="Evaluate a local checkpoint directory. Writes OUT/run.json, OUT/summary.json and\n"
                    "OUT/<task>/samples.jsonl, and appends every metric to the results store. A task already\n"
                    "in the store for this checkpoint and setup is not run again; a killed run started again\n"
                    "resumes from its last finished batch.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(func=main, raw_args=True)


def main(args) -> int:
    import json

    from evalsuite.run_config import load_eval_config

    cfg, own = load_eval_config(args.raw)
    if own.get("dry_run"):
        return dry_run(cfg)
    from evalsuite.dist import Dist, destroy_process_group, init_process_group
    from evalsuite.run import run_eval

    started = init_process_group(cfg.device)  # under torchrun / accelerate launch (docs/multi-gpu.md)
    try:
        summary = run_eval(cfg)
        main_rank = Dist.current().is_main
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


def dry_run(cfg) -> int:
    import logging

    from evalsuite.config import print_resolved

    print_resolved(cfg, logging.getLogger("evalsuite.run"))
    return 0
