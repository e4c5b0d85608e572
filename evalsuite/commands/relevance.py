"""`evalsuite relevance pairs`: CLIP image-relevance of the chosen and rejected side of preference pairs.

    evalsuite relevance pairs --pairs data/csr_iter0.json --image-root W/images/train \\
        --clip /models/clip-vit-large-patch14-336 --output runs/relevance/iter0 --plot

Writes OUT/pair_scores.jsonl (one row per pair: both sides' per-sentence and whole-response scores),
OUT/summary.json (mean/median/std of each side, chosen-rejected gap with a bootstrap CI) and, with
--plot, OUT/density.{svg,png}; prints one summary line. The data behind CSR's density figure.
"""
from __future__ import annotations

import argparse
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("relevance", help="CLIP image-relevance scores of preference pairs",
                       description="CLIP image-response relevance, R = max(logit_scale * cos, 0).")
    rsub = p.add_subparsers(dest="relevance_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    pp = rsub.add_parser("pairs", help="score the chosen and rejected responses of a preference file",
                         description="Score both sides of every pair of a LLaVA-style (conversations / "
                                     "rejected_conversations) or plain_dpo ({image, prompt, chosen, rejected}) "
                                     "file, .json list or .jsonl.")
    pp.add_argument("--pairs", required=True, type=Path, help="preference pairs file (.json or .jsonl)")
    pp.add_argument("--image-root", required=True, type=Path, help="folder the records' image paths are under")
    pp.add_argument("--clip", required=True, type=Path, help="local CLIP/SigLIP checkpoint directory")
    pp.add_argument("--output", type=Path, default=None,
                    help="output folder (default: runs/relevance/<pairs file stem>)")
    pp.add_argument("--batch-size", type=int, default=32, help="texts/images per CLIP forward (default 32)")
    pp.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    pp.add_argument("--limit", type=int, default=None, help="score only the first N pairs")
    pp.add_argument("--plot", action="store_true", help="also write density.svg/png of both sides")
    pp.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from evalsuite.errors import UserError
    from evalsuite.files import sha256_file, write_json_atomic, write_jsonl_atomic
    from evalsuite.metrics.relevance import RelevanceScorer, read_pairs, score_pairs

    if not args.image_root.is_dir():
        raise UserError(f"--image-root {args.image_root}: not a directory")
    pairs = read_pairs(args.pairs)[: args.limit]
    if not pairs:
        raise UserError(f"{args.pairs}: no pairs to score")
    out = args.output or Path("runs") / "relevance" / args.pairs.stem
    _check_output(out)
    scorer = RelevanceScorer(args.clip, device=args.device, batch_size=args.batch_size)
    rows, summary = score_pairs(scorer, pairs, args.image_root, progress=True)
    summary.update(pairs_file=str(args.pairs), pairs_sha256=sha256_file(args.pairs),
                   image_root=str(args.image_root))
    if args.plot:
        from evalsuite.metrics.relevance_plot import density_plot

        plot = density_plot({"chosen": [r["chosen_relevance"] for r in rows],
                             "rejected": [r["rejected_relevance"] for r in rows]}, out / "density")
        summary["plot"] = {"svg": str(plot["svg"]), "png": str(plot["png"])}
    write_jsonl_atomic(out / "pair_scores.jsonl", rows)
    write_json_atomic(out / "summary.json", summary)
    c, r, g = summary["chosen"], summary["rejected"], summary["gap"]
    print(f"relevance pairs: n={summary['n_pairs']} chosen {c['mean']:.3f} rejected {r['mean']:.3f} "
          f"gap {g['mean']:+.3f} [{g['ci_low']:+.3f}, {g['ci_high']:+.3f}] -> {out}")
    return 0


def _check_output(out: Path) -> None:
    """`out` may be new, empty, or an earlier `relevance pairs` output (replaced); a file of the names it
    writes that this command did not write is refused before the scorer loads."""
    from evalsuite.files import ensure_writable_dir
    from evalsuite.ownership import refuse_foreign

    ensure_writable_dir(out, "--output", create=False)

    def ours_summary(p: Path) -> bool:
        import json

        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(doc, dict) and {"n_pairs", "pairs_sha256", "gap", "chosen_wins"} <= set(doc)

    refuse_foreign(out / "summary.json", "--output", ours_summary)
    earlier = (out / "summary.json").is_file()
    # the rows and the plot are ours when they sit beside an earlier run's summary
    for name in ("pair_scores.jsonl", "density.svg", "density.png"):
        refuse_foreign(out / name, "--output", lambda p: earlier)
