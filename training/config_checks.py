"""Value checks of `training.config.TrainConfig` (one `UserError` line naming the field; no file, model or
dataset is touched except by `validate_paths`). No model library is imported unless a field needs this
machine's GPU (q_lora, use_flash_attention_2); transformers' own TrainingArguments checks run later,
when training starts (`TrainConfig.check_ready`), and these name the field first."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from evalsuite.config import check_fields
from evalsuite.errors import UserError

# Which dataset formats each method trains on (the loaders live in training/data/).
SFT_DATASETS = ("vlquery_json",)
PAIR_DATASETS = ("plain_dpo", "csr_pairs", "vlfeedback_paired", "rlhfv")
REPORT_TO = ("none", "tensorboard", "wandb")


def require(cond: bool, field_name: str, message: str) -> None:
    if not cond:
        raise UserError(f"{field_name}: {message}")


def has_module(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def validate_values(cfg):
    """Reject bad values and combinations; no model, dataset, image or file is touched. Choices and
    ranges are declared on the fields (training/config.py) and checked by `check_fields`."""
    check_fields(cfg)
    _validate_data(cfg)
    _validate_schedule(cfg)
    _validate_lengths(cfg)
    _validate_model(cfg)
    _validate_logging(cfg)
    cfg.input_config()  # image_aspect value, empty system_prompt
    return cfg


def _strategy(value: Any) -> str:
    """A TrainingArguments strategy as its word, whether given as text or already an enum."""
    return str(getattr(value, "value", value))


def _steps(cfg, name: str, strategy: str, fallback: str | None = None) -> None:
    """`name` is used only under `strategy: steps`: then > 0, and a whole number above 1 (below 1 it is a
    fraction of the training steps). None falls back to `fallback` (eval_steps -> logging_steps)."""
    if _strategy(getattr(cfg, strategy)) != "steps":
        return
    value = getattr(cfg, name)
    if value is None and fallback:  # transformers takes the fallback's value then, whatever its own strategy
        name, value = fallback, getattr(cfg, fallback)
    require(value is not None and value > 0, name, f"must be > 0 with {strategy} steps, got {value}")
    require(value < 1 or float(value).is_integer(), name, f"must be a whole number of steps (or a fraction "
                                                           f"< 1 of the training steps), got {value}")


def validate_numbers(cfg) -> None:
    """Batch, schedule and step counts that TrainingArguments accepts or rejects without naming the flag."""
    for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
        require(getattr(cfg, name) >= 1, name, f"must be >= 1, got {getattr(cfg, name)}")
    require(cfg.learning_rate > 0, "learning_rate", f"must be > 0, got {cfg.learning_rate}")
    require(cfg.weight_decay >= 0, "weight_decay", f"must be >= 0, got {cfg.weight_decay}")
    require(cfg.max_steps == -1 or cfg.max_steps > 0, "max_steps",
             f"must be -1 (train num_train_epochs) or > 0, got {cfg.max_steps}")
    require(cfg.max_steps > 0 or cfg.num_train_epochs > 0, "num_train_epochs",
             f"must be > 0 when max_steps is -1, got {cfg.num_train_epochs}")
    _steps(cfg, "logging_steps", "logging_strategy")
    _steps(cfg, "save_steps", "save_strategy")
    _steps(cfg, "eval_steps", "eval_strategy", fallback="logging_steps")
    if cfg.warmup_steps is not None:
        require(cfg.warmup_steps >= 0, "warmup_steps", f"must be >= 0, got {cfg.warmup_steps}")


def _validate_schedule(cfg) -> None:
    if cfg.warmup_ratio is not None:
        require(not cfg.warmup_steps, "warmup_ratio", f"give warmup_ratio or warmup_steps, not both "
                                                       f"(warmup_steps is {cfg.warmup_steps})")


def validate_paths(cfg) -> None:
    require(bool(cfg.model_name_or_path), "model_name_or_path", "required")
    model_dir = Path(cfg.model_name_or_path)
    require(model_dir.is_dir(), "model_name_or_path", f"{str(model_dir)!r} is not a local checkpoint directory")
    require((model_dir / "config.json").is_file(), "model_name_or_path", f"no config.json in {str(model_dir)!r}")
    if cfg.method != "csr":  # the CSR loop writes its pair file per iteration
        require(bool(cfg.data_path), "data_path", "required")
        require(Path(cfg.data_path).exists(), "data_path", f"no such file or directory {cfg.data_path!r}")
    if cfg.image_root:
        require(Path(cfg.image_root).is_dir(), "image_root", f"no such directory {cfg.image_root!r}")
    if cfg.inputs.chat_template:
        require(Path(cfg.inputs.chat_template).is_file(), "inputs.chat_template",
                f"no such file {cfg.inputs.chat_template!r}")


def _validate_data(cfg) -> None:
    name = cfg.resolved_dataset
    allowed = SFT_DATASETS if cfg.method == "sft" else PAIR_DATASETS
    require(name in allowed, "dataset_name", f"{name!r} is not a {cfg.method} dataset ({', '.join(allowed)})")


def _validate_lengths(cfg) -> None:
    # only where max_prompt_length is read: SFT under truncation vlrlhf never reads it (`unread`), so a short
    # max_length there must not ask for a max_prompt_length that would then be refused as unread
    if _prompt_length_read(cfg):
        require(cfg.max_prompt_length < cfg.max_length, "max_prompt_length",
                 f"{cfg.max_prompt_length} leaves no room for the target within max_length {cfg.max_length}")


def _prompt_length_read(cfg) -> bool:
    """SFT under truncation vlrlhf never reads max_prompt_length (training/trainers/collate.py)."""
    return not (cfg.method == "sft" and cfg.truncation != "per_field")


def _validate_model(cfg) -> None:
    if cfg.use_lora:
        require(cfg.lora_r > 0, "lora_r", f"must be > 0, got {cfg.lora_r}")
        require(cfg.lora_alpha > 0, "lora_alpha", f"must be > 0, got {cfg.lora_alpha}")
        require(0.0 <= cfg.lora_dropout < 1.0, "lora_dropout", f"must be in [0, 1), got {cfg.lora_dropout}")
        require(bool(cfg.lora_target_modules.strip(",").strip()), "lora_target_modules", "empty")
    if cfg.q_lora:
        require(cfg.use_lora, "q_lora", "needs --use_lora true")
        require(cfg.bits in (4, 8), "bits", f"must be 4 or 8, got {cfg.bits}")
        import torch

        require(torch.cuda.is_available(), "q_lora", "needs a CUDA GPU (bitsandbytes quantisation)")
        require(has_module("bitsandbytes"), "q_lora", "needs the bitsandbytes package (pip install bitsandbytes)")
    if cfg.use_flash_attention_2:
        import torch

        require(torch.cuda.is_available(), "use_flash_attention_2", "needs a CUDA GPU")
        require(has_module("flash_attn"), "use_flash_attention_2", "needs the flash-attn package (pip install flash-attn)")


def report_targets(cfg) -> list:
    """`report_to` as a list (TrainingArguments takes one name or a list)."""
    return list(cfg.report_to) if isinstance(cfg.report_to, list) else [cfg.report_to]


def _validate_logging(cfg) -> None:
    targets = [t for t in report_targets(cfg) if t != "none"]
    for t in targets:
        require(t in REPORT_TO, "report_to", f"{t!r} is not one of {', '.join(REPORT_TO)}")
    if "tensorboard" in targets:
        require(has_module("tensorboard") or has_module("tensorboardX"), "report_to", "tensorboard needs the tensorboard package")
    if "wandb" in targets:
        require(has_module("wandb"), "report_to", "wandb needs the wandb package")
    require(cfg.wandb_mode in ("offline", "online", "disabled"), "wandb_mode",
             f"{cfg.wandb_mode!r} is not offline|online|disabled")


# Fields read only under one value of another field (`unread`): set while that field says otherwise, they would
# be accepted and ignored. evalsuite/config.py `report_unread` refuses them from the command line and warns
# about them from a preset (a preset may serve both settings: configs/csr.yaml under train.use_lora=false).
LORA_FIELDS = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_scope", "lora_bias",
               "modules_to_save", "lora_merge")   # training/trainers/model.py lora_config; common.py's merge
DPO_FIELDS = ("beta", "loss_type", "ipo_logps", "ddpo_mask", "label_smoothing", "rpo_alpha", "precompute_ref_log_probs")
MERGE_FIELDS = ("merged_dir", "merge_dtype", "iteration", "parent")  # the merged checkpoint and its manifest
WANDB_FIELDS = ("wandb_mode", "project_name", "group_name")  # training/trainers/model.py setup_reporting
# TrainingArguments fields only transformers' evaluation loop reads (Trainer.evaluate and what it calls); nothing in
# training/ calls evaluate(), so without an evaluation (eval_strategy no, eval_on_start false) they reach nothing.
# fp16_full_eval / bf16_full_eval are not here: they also decide where the model is placed for training.
EVAL_FIELDS = ("per_device_eval_batch_size", "eval_accumulation_steps", "eval_do_concat_batches",
               "eval_use_gather_object", "include_for_metrics", "batch_eval_metrics")


def unread(cfg) -> list[tuple[str, str, Any, Any]]:
    """(field, switch, the switch's value, the value under which the field is read) for each field of a
    TrainConfig that its other settings never read (the first reason per field)."""
    out: dict[str, tuple[str, str, Any, Any]] = {}

    def off(names, switch: str, need: Any, now: Any = None) -> None:
        for name in names:
            out.setdefault(name, (name, switch, getattr(cfg, switch) if now is None else now, need))

    if not cfg.use_lora:
        off(LORA_FIELDS, "use_lora", True)
    if not cfg.q_lora:
        off(("bits",), "q_lora", True)
    if not cfg.save_merged:
        off(MERGE_FIELDS + ("lora_merge",), "save_merged", True)
    if cfg.method == "sft":
        off(DPO_FIELDS, "method", "dpo")
        if cfg.sft_split == "vlrlhf":  # released SFT computes a data_ratio subset and never trains on it
            off(("data_ratio",), "sft_split", "held_out")
    else:
        off(("sft_split",), "method", "sft")
    if cfg.loss_type not in ("sigmoid", "ddpo"):  # training/losses.py: only these two smooth their labels
        off(("label_smoothing",), "loss_type", "sigmoid")
    for name, loss in (("ipo_logps", "ipo"), ("ddpo_mask", "ddpo")):
        if cfg.loss_type != loss:
            off((name,), "loss_type", loss)
    if cfg.truncation != "per_field":  # training/trainers/collate.py: vlrlhf never reads these
        off(("max_target_length",) + (() if _prompt_length_read(cfg) else ("max_prompt_length",)), "truncation",
            "per_field")
    if cfg.resolved_dataset != "vlfeedback_paired":
        off(("score_margin",), "dataset_name", "vlfeedback_paired", now=cfg.resolved_dataset)
    targets = report_targets(cfg)
    if "wandb" not in targets:
        off(WANDB_FIELDS, "report_to", "wandb", now=",".join(map(str, targets)) or "none")
    for name, strategy in (("logging_steps", "logging_strategy"), ("save_steps", "save_strategy"),
                           ("eval_steps", "eval_strategy")):
        if _strategy(getattr(cfg, strategy)) != "steps" and not (name == "logging_steps" and _logging_steps_read(cfg)):
            off((name,), strategy, "steps", now=_strategy(getattr(cfg, strategy)))
    if _strategy(cfg.eval_strategy) == "no":
        # eval_delay: only the step/epoch schedule reads it (not eval_on_start's evaluation)
        off(("eval_delay",) + (() if cfg.eval_on_start else EVAL_FIELDS), "eval_strategy", "steps", now="no")
        if cfg.method == "sft" and cfg.sft_split == "vlrlhf" and not cfg.eval_on_start:
            # the eval_split rows train too (training/data/__init__.py) and no evaluation reads them
            off(("eval_split",), "eval_strategy", "steps", now="no")
    if _strategy(cfg.save_strategy) == "no" and not (cfg.save_on_signal or cfg.enable_jit_checkpoint):
        # transformers applies it when a checkpoint is written (Trainer._save_checkpoint): with save_strategy no
        # only a signal's save (training/signals.py, or transformers' own enable_jit_checkpoint) writes one
        off(("save_total_limit",), "save_strategy", "steps", now="no")
    return list(out.values())


def _logging_steps_read(cfg) -> bool:
    """logging_steps is read off `logging_strategy: steps` too: TrainingArguments sets an unset eval_steps to
    it under `eval_strategy: steps` (eval_steps' help in training/hf_fields.py), and transformers' wandb
    callback watches the model every max(100, logging_steps) steps when WANDB_WATCH asks it to."""
    import os

    if _strategy(cfg.eval_strategy) == "steps" and cfg.eval_steps is None:
        return True
    targets = report_targets(cfg)
    return "wandb" in targets and os.environ.get("WANDB_WATCH", "false") in ("all", "parameters", "gradients")
