"""`evalsuite chair`: score existing captions with CHAIR (object hallucination).

    evalsuite chair --captions answers.jsonl --gt gt_objects_coco2014_pattern.json.gz --output runs/chair/x
    evalsuite chair --captions answers.jsonl --gt /data/coco --variant opera

Lines are `{"image_id": int, "caption": str}` or LLaVA answers `{"image_id": int or "COCO_..._000000002239.jpg",
"text": str}`. Writes OUT/summary.json (variant, tokenizer, integer counts, CHAIRs, CHAIRi, Recall, Len, ci,
NLTK resource checksums) and OUT/per_caption.jsonl, and prints a one-line table: CHAIRs, CHAIRi and Recall
as fractions (0-1, as `evalsuite table` and the report show them) with 95% CIs, Len in tokens.

The file is read one line at a time (checked whole first, then scored) and per-caption records are
written as they are scored, so memory does not grow with the number of captions; a line over 1 MiB
is an error naming it. An OUT holding a summary.json or per_caption.jsonl that this command did not
write is refused.
"""
from __future__ import annotations

import argparse
from pathlib import Path

VARIANT_NAMES = ("original", "opera", "opera_lemma")


def register(sub) -> None:
    p = sub.add_parser("chair", help="CHAIR object hallucination of a captions file",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--captions", required=True, type=Path, help="captions .jsonl")
    p.add_argument("--gt", default=None,
                   help="GT cache (.json/.json.gz from `evalsuite chair-gt`) or a COCO folder with "
                        "instances*/captions* json (GT is built once and cached)")
    p.add_argument("--variant", default="original",
                   help=f"one of {', '.join(VARIANT_NAMES)} (default original: the CHAIR/CSR script)")
    p.add_argument("--tokenizer", default="nltk38",
                   help="word tokenizer rules: nltk38 (default: NLTK <= 3.8's, as the reference scripts and "
                        "published numbers ran) or nltk310 (NLTK 3.9+: stray apostrophes inside words kept, "
                        "docs/chair.md)")
    p.add_argument("--output", type=Path, default=None, help="output folder (default runs/chair/<stem>-<variant>)")
    p.add_argument("--allow-missing", action="store_true",
                   help="score images absent from the GT with an empty GT (the reference's silent behaviour)")
    p.add_argument("--nltk-data", default=None, help="NLTK data folder (else NLTK_DATA)")
    p.add_argument("--cache-dir", type=Path, default=None, help="GT cache folder (default ~/.cache/evalsuite)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for the CIs (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from evalsuite.errors import UserError
    from evalsuite.files import sha256_file, write_json_atomic
    from evalsuite.metrics import chair, chair_io, chair_tokenize, nltk_resources

    variant = chair.get_variant(args.variant)  # unknown variant fails before anything loads
    tokenizer = chair_tokenize.get_tokenizer(args.tokenizer, "--tokenizer")
    if args.gt is None:
        raise UserError("--gt: required (a GT cache .json[.gz] or a COCO annotations folder)")
    if args.n_boot < 0:
        raise UserError(f"--n-boot: must be >= 0, got {args.n_boot}")
    out = args.output or Path("runs") / "chair" / f"{args.captions.stem}-{variant.name}"
    chair_io.check_output_dir(out)
    image_ids = chair_io.caption_image_ids(args.captions)  # every record checked before anything loads
    nltk_resources.add_data_dir(args.nltk_data)
    scorer = chair.ChairScorer(variant.name, tokenizer=tokenizer)
    gt, gt_meta = chair_io.resolve_gt(args.gt, variant.gt, args.cache_dir, tokenizer)
    n_missing = chair.check_missing(image_ids, gt, args.allow_missing, str(args.captions))
    del image_ids
    counts = chair.ChairCounts()
    with chair_io.JsonlSink(out / "per_caption.jsonl") as sink:
        for index, (where, image_id, caption) in enumerate(chair_io.iter_caption_lines(args.captions)):
            record = {"index": index, "image_id": image_id, **scorer.score(caption, gt.get(image_id, ()), where)}
            counts.add(record)
            sink.write(record)
    summary = chair.summarize(counts, variant.name, n_boot=args.n_boot, seed=args.seed)
    summary.update(
        tokenizer=tokenizer, captions=str(args.captions), captions_sha256=sha256_file(args.captions), gt=gt_meta,
        normalizer=variant.normalizer, gt_normalizer=variant.gt,
        nltk_resources=nltk_resources.resource_checksums(scorer.resources),
        missing_gt=n_missing,
    )
    write_json_atomic(out / "summary.json", summary)
    # fractions with their 95% CIs, as `evalsuite table` and the report show them (papers print percent)
    print(f"{'variant':<12} {'caps':>5} {'CHAIRs':>21} {'CHAIRi':>21} {'Recall':>21} {'Len':>7}   -> {out}")
    cells = [f"{summary[m]:.3f} [{summary['ci'][m][0]:.3f}, {summary['ci'][m][1]:.3f}]" for m in ("CHAIRs", "CHAIRi", "Recall")]
    print(f"{variant.name:<12} {summary['num_caps']:>5} " + " ".join(f"{c:>21}" for c in cells) + f" {summary['Len']:>7.2f}")
    print("(fractions, 0-1, with 95% bootstrap CIs; Len in tokens per caption)")
    return 0
