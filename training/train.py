"""Training entry point: one config mechanism, validated before any model loads, then dispatch by method.

    python training/train.py                                   # no arguments: the built-in demo (configs/demo.yaml)
    python training/train.py --config configs/train/tiny_cpu.yaml --loss_type ipo --output_dir out
    python training/train.py --config configs/csr.yaml iterations=1 tree.max_depth=4
    python training/train.py --config configs/csr.yaml --dry-run     # check + print the resolved config
    python training/train.py --method sft --model_name_or_path CK --data_path sft.json --output_dir out
    torchrun --nproc_per_node 2 training/train.py --config ...          # DDP (gloo on CPU)
    accelerate launch --config_file configs/accelerate/zero2.yaml training/train.py --config ...

Every preset names its `method:` (sft | dpo | csr | demo); `--method` overrides it. Overrides follow the
preset: `--key value` (the VL-RLHF / TrainingArguments names), `key=value` and `section.key=value`
(nested CSR/demo sections, e.g. `train.learning_rate=1e-7`). A bad key, type or value is one line on
stderr and exit code 2 before any model is loaded; `--dry-run` prints the resolved config as YAML,
warns about paths that do not exist (presets carry placeholders) and exits 0. The resolved config is
saved beside every checkpoint (its manifest) and run directory.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

REPO = Path(__file__).resolve().parent.parent
DEMO_CONFIG = REPO / "configs" / "demo.yaml"
METHODS = ("sft", "dpo", "csr", "demo")
log = logging.getLogger("train.py")

USAGE = """usage: train.py [--config PRESET.yaml] [--method {sft,dpo,csr,demo}] [--dry-run] [OVERRIDES ...]

Train a VLM: SFT, DPO (--loss_type sigmoid|hinge|ipo|kto_pair|ddpo), the CSR loop, or the built-in demo.
With no arguments: the demo (configs/demo.yaml).

  --config F      a YAML preset (configs/); it names its method
  --method M      sft | dpo | csr | demo (overrides the preset's)
  --dry-run       validate everything, print the resolved config as YAML, warn about missing paths, exit
  --restart-from S  csr: discard stage S (iter_T/STAGE, STAGE one of generate, score, pairs, train, eval; or
                  base_eval) and what depends on it, and recompute them under this command's settings
  --help          this text; with --method/--config also the method's fields

OVERRIDES (later wins over the preset): --key value, --key=value, --flag (= true; a true/false field only), key=value,
section.key=value; values are read as YAML (1e-7, true, [chair, pope]).
sft/dpo take the VL-RLHF names (model_name_or_path, data_path, image_root, dataset_name, beta, loss_type,
lora_r, ...) on top of every transformers TrainingArguments field (output_dir, learning_rate, ...)."""


def load(method: str | None, path: str | None, items: list, dry_run: bool = False):
    """The validated config object of `method` from the preset at `path` plus override `items`."""
    from evalsuite.config import apply_overrides, build, read_yaml
    from evalsuite.errors import UserError

    from training.config import ALIASES, fold_aliases

    data = fold_aliases(read_yaml(path), str(path)) if path else {}
    where = str(path) if path else "command line"
    origins: dict[str, str] = {}
    apply_overrides(data, [(ALIASES.get(k, k), v) for k, v in items], origins)
    method = method or data.get("method")
    if method is None:
        raise UserError("no method: pass --method sft|dpo|csr|demo or a --config preset that names its `method:`")
    if method not in METHODS:
        raise UserError(f"method: {method!r} is not one of {', '.join(METHODS)}")
    data["method"] = method
    if method in ("sft", "dpo"):
        from training.config import build_train_config

        if path:
            data.setdefault("config", str(path))
        return build_train_config(data, where, origins, portable=dry_run)
    if method == "csr":
        if not dry_run:  # before check_ready builds TrainingArguments: accelerate would start the group
            _join_group(data.get("device"))  # with its 30-minute default, too short for the loop's barriers
        from training.csr.config import CSRConfig as cls
    else:
        from training.demo import DemoConfig as cls
    return build(cls, data, where, origins)


def run(cfg, restart_from: str | None = None) -> object:
    """Start the method's workflow on a validated config (paths are checked first)."""
    from evalsuite.errors import UserError

    if restart_from and cfg.method != "csr":
        raise UserError(f"--restart-from: only the CSR loop has stages to restart (method {cfg.method}); "
                        "pass another output_dir to train afresh")
    cfg.check_ready()
    if cfg.method == "sft":
        from training.trainers.sft import run_sft

        return run_sft(cfg)
    if cfg.method == "dpo":
        from training.trainers.dpo import run_dpo

        return run_dpo(cfg)
    if cfg.method == "csr":
        from training.csr.loop import run_csr

        return run_csr(cfg, _join_group(cfg.device), restart_from=restart_from)[-1]
    from training.demo import run_demo

    return run_demo(cfg)


def _join_group(device):
    """This process's `Dist`, resolved here once for the CSR loop, which receives it; under torchrun the
    launcher's process group is joined with the loop's long timeout (a no-op when already joined)."""
    from evalsuite.dist import Dist
    from training.csr.loop import GROUP_TIMEOUT

    dist = Dist.current()
    dist.init_group(device, timeout=GROUP_TIMEOUT)
    return dist


def dry_run(cfg) -> int:
    from evalsuite.config import print_resolved

    print_resolved(cfg, log)
    return 0


def help_text(method: str | None, path: str | None) -> str:
    """USAGE, plus the fields of the method named on the command line or in the preset."""
    from evalsuite.config import help_lines, read_yaml

    method = method or (read_yaml(path).get("method") if path else None)
    if method not in METHODS:
        return USAGE
    if method in ("sft", "dpo"):  # evalsuite's fields and the transformers TrainingArguments ones
        from training.config import TrainConfig as cls
    elif method == "csr":
        from training.csr.config import CSRConfig as cls
    else:
        from training.demo import DemoConfig as cls
    lines = [USAGE, "", f"{method} fields ({cls.__module__}.{cls.__name__}; a section's keys as section.key):",
             *help_lines(cls)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from evalsuite.config import split_args
    from evalsuite.errors import RunFailure, UserError, say

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # no arguments: the built-in demo, the first thing a new user runs
        argv = ["--config", str(DEMO_CONFIG)]
    from evalsuite.env import setup_process

    setup_process()  # offline env (checkpoints and data are local paths) + logging, as the evalsuite CLI
    try:
        argv = ["--help" if a == "-h" else a for a in argv]
        own, items = split_args(argv, ("config", "method", "dry_run!", "help!", "restart_from"))
        if own.get("help"):
            print(help_text(own.get("method"), own.get("config")))
            return 0
        cfg = load(own.get("method"), own.get("config"), items, dry_run=bool(own.get("dry_run")))
        if own.get("dry_run"):
            return dry_run(cfg)
        from evalsuite.interrupts import interrupt_exit

        with interrupt_exit("train.py", lambda: continue_hint(cfg, argv)):   # SIGINT/SIGTERM: one line, exit 130/143
            result = run(cfg, own.get("restart_from"))
        # one write: every torchrun rank prints it to the shared (unbuffered: `python -u`) stdout, where
        # print's two writes (text, newline) let two ranks' lines run together (evalsuite.errors.say)
        sys.stdout.write(f"{result}\n")
        sys.stdout.flush()
        return 0
    except UserError as e:
        say(f"train.py: error: {e}")
        return UserError.exit_code
    except RunFailure as e:   # a run that started and failed: its message, one line, no traceback
        say(f"train.py: error: {' '.join(str(e).split())}")
        return RunFailure.exit_code


def continue_hint(cfg, argv: list[str]) -> str:
    """What the SIGINT/SIGTERM line says continues the run: the CSR loop and the demo resume their finished
    stages when the same command runs again; sft/dpo continue from their last checkpoint with
    --resume_from_checkpoint true (added to the same command unless it is there)."""
    import shlex

    kept, skip = [], False
    for a in argv:   # --restart-from discards again on every run: continuing is the command without it
        if skip or a.startswith(("--restart-from", "--restart_from")):
            skip = a in ("--restart-from", "--restart_from") and not skip
            continue
        kept.append(a)
    command = "python training/train.py " + " ".join(shlex.quote(a) for a in kept)
    if cfg.method == "csr":
        return f" (finished stages stay in {cfg.run_dir}; continue with the same command: {command})"
    out = getattr(cfg, "output_dir", None)
    if cfg.method not in ("sft", "dpo") or not out:
        return f" (continue with the same command: {command})"
    from training.resume import latest_checkpoint

    if latest_checkpoint(out)[0] is None:   # nothing to resume: the same command starts the run again
        return f" (no checkpoint saved in {out}; start again with the same command: {command})"
    if not any(a.replace("-", "_").startswith("--resume_from_checkpoint") or a.startswith("resume_from_checkpoint=")
               for a in argv):
        command += " --resume_from_checkpoint true"
    return f" (checkpoints saved so far stay in {out}; continue with: {command})"


if __name__ == "__main__":
    sys.exit(main())
