"""`evalsuite csr-convert`: CSR's released prompt file / preference json -> what the CSR loop and the
trainer read (evalsuite/convert/csr.py)."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("csr-convert", help="convert CSR's released prompt file or preference json",
                       description="prompts: CSR-Prompt-Dataset-12k.json -> {id, image, question} jsonl for "
                                   "configs/csr.yaml's `prompts` (image names get the COCO_train2014_ prefix). "
                                   "pairs: a released CSR preference json -> csr_pairs records (bare question, "
                                   "image relative to the image root).")
    p.add_argument("kind", choices=["prompts", "pairs"], help="what the input file is")
    p.add_argument("input", help="the released json file")
    p.add_argument("--out", required=True, help="output file (prompts: .jsonl, pairs: .json)")
    p.add_argument("--image-prefix", default=None,
                   help="prompts only: prefix the released sampler adds to each image name (default COCO_train2014_)")
    p.add_argument("--image-dir", default=None,
                   help="pairs only: the image folder construct.py joined into each image path "
                        "(default: keep the file name)")
    p.add_argument("--image-root", default=None,
                   help="check that every image exists under this directory (the run's image_root)")
    p.set_defaults(func=main)


def main(args) -> int:
    import json
    from pathlib import Path

    from evalsuite.convert.csr import COCO_TRAIN_PREFIX, check_images, convert_pairs, convert_prompts
    from evalsuite.errors import UserError
    from evalsuite.files import write_json_atomic, write_jsonl_atomic

    # each option shapes one kind of file: given with the other it would be accepted and ignored
    for flag, value, kind in (("--image-prefix", args.image_prefix, "prompts"), ("--image-dir", args.image_dir, "pairs")):
        if value is not None and args.kind != kind:
            raise UserError(f"{flag}: only applies to `csr-convert {kind}`, not {args.kind}")
    src = Path(args.input)
    if not src.is_file():
        raise UserError(f"{src}: no such file")
    try:
        rows = json.loads(src.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"{src}: invalid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(rows, list) or not rows:
        raise UserError(f"{src}: expected a non-empty JSON list of records")
    if args.kind == "prompts":
        records = convert_prompts(rows, str(src), args.image_prefix or COCO_TRAIN_PREFIX)
    else:
        records = convert_pairs(rows, str(src), args.image_dir)
    if args.image_root:
        check_images(records, args.image_root)
    write = write_jsonl_atomic if args.kind == "prompts" else write_json_atomic
    write(args.out, records)
    print(f"{args.out}: {len(records)} {args.kind}")
    return 0
