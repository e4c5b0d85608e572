"""Process-wide settings, made once by the entry points (`evalsuite` CLI, training/train.py), never on import.

    from evalsuite.env import setup_process
    setup_process(verbose=False)

- Offline: checkpoints and data are local paths, so the Hugging Face libraries must never try the
  network (and lmms-eval / huggingface_hub read these variables when they are imported). A value the
  user already exported is kept.
- lmms-eval's request cache goes to a temp dir instead of its default inside site-packages.
- Logging: one `logging` configuration on stderr (stdout is left for each command's final output).
  Libraries' import-time INFO chatter (numexpr's thread count, via pandas) is raised to WARNING, so a
  one-line error stays one line.
- Progress: when stderr is not a terminal (a log file, a pipe), the libraries' tqdm bars (the Trainer's,
  model loading, lmms-eval) redraw at most every 30 s (TQDM_MININTERVAL, unless exported); evalsuite's
  own bars print plain lines instead (evalsuite/progress.py).
"""
from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# loggers that say at INFO what nobody asked for on every start
QUIET_LOGGERS = ("numexpr",)


def set_offline_env() -> None:
    for key in OFFLINE_ENV:
        os.environ.setdefault(key, "1")
    os.environ.setdefault("LM_HARNESS_CACHE_PATH", str(Path(tempfile.gettempdir()) / "evalsuite-lmms-cache"))


def setup_process(verbose: bool = False) -> None:
    """Offline environment + logging on stderr; call once at the top of an entry point."""
    set_offline_env()
    from evalsuite.progress import EVERY_S, is_terminal

    if not is_terminal(sys.stderr):
        os.environ.setdefault("TQDM_MININTERVAL", f"{EVERY_S:g}")
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=LOG_FORMAT,
                        datefmt="%H:%M:%S", stream=sys.stderr)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
