"""Training entry point: parse -> validate -> dispatch by method.

    python training/train.py                      # no arguments: the built-in demo (configs/demo.yaml)
    python training/train.py --config configs/train/tiny_cpu.yaml --loss_type ipo
    python training/train.py --config configs/train/tiny_cpu.yaml --method sft --data_path sft.json
    torchrun --nproc_per_node 2 training/train.py --config ...          # DDP (gloo on CPU)
    accelerate launch --config_file configs/accelerate/zero2.yaml training/train.py --config ...

Each method is a lazily imported `main(argv) -> int`, so `--help` and bad flags answer at once.
A bad value or path is one line on stderr and exit code 2, before any model is loaded.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

METHODS = {
    "sft": "training.trainers.sft:main",
    "dpo": "training.trainers.dpo:main",
    "csr": "training.csr.loop:main",
    "demo": "training.demo:main",
}


DEMO_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "demo.yaml"


def _method(argv: list[str]) -> str:
    """--method from the command line, else from the --config YAML, else dpo."""
    for i, a in enumerate(argv):
        if a == "--method" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--method="):
            return a.split("=", 1)[1]
    from training.config import _split_config_flag, read_yaml

    path, _ = _split_config_flag(argv)
    return str(read_yaml(path).get("method", "dpo")) if path else "dpo"


def main(argv: list[str] | None = None) -> int:
    import importlib

    from evalsuite.errors import UserError

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # no arguments: the built-in demo, the first thing a new user runs
        argv = ["--config", str(DEMO_CONFIG)]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if any(a in ("-h", "--help") for a in argv):
            from training.config import _parser

            _parser().print_help()
            return 0
        method = _method(argv)
        if method not in METHODS:
            raise UserError(f"method: {method!r} is not one of {', '.join(METHODS)}")
        module, func = METHODS[method].split(":")
        return int(getattr(importlib.import_module(module), func)(argv) or 0)
    except UserError as e:
        print(f"train.py: error: {e}", file=sys.stderr)
        return UserError.exit_code


if __name__ == "__main__":
    sys.exit(main())
