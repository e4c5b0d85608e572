"""Pieces SFT and DPO share: HF trainer arguments from a TrainConfig, the json metrics log, the finish."""
from __future__ import annotations

import logging
from pathlib import Path

from transformers import TrainerCallback

log = logging.getLogger(__name__)


def trainer_args(cfg) -> dict:
    """TrainingArguments fields for a DPOConfig/SFTConfig, with the settings our collators need."""
    kw = cfg.trainer_kwargs()
    kw["remove_unused_columns"] = False  # the collators read image/prompt/... columns themselves
    # TRL would default checkpointing on; the deprecated `gradient_checkpointing` alias is folded into
    # transformers 5's `activation_checkpointing` so no FutureWarning is printed on every run
    kw["activation_checkpointing"] = bool(kw.get("activation_checkpointing") or kw.get("gradient_checkpointing"))
    kw["gradient_checkpointing"] = None
    # resuming a LoRA run, peft's load_adapter reads the model's old-name `is_gradient_checkpointing`
    # property, which transformers 5 deprecates with a FutureWarning each time (4x per resume): not ours
    # to act on, and the run uses the new name
    import warnings

    warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
    kw["prediction_loss_only"] = True
    if kw.get("ddp_find_unused_parameters") is None and cfg.use_lora:
        kw["ddp_find_unused_parameters"] = False  # LoRA on the LLM only: every trainable param gets a grad
    return kw


class JsonLogCallback(TrainerCallback):
    """Every logged row (loss, rewards/*, logps/*, lr, ...) also goes to a JSON Lines file, rewritten atomically."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.rows: list[dict] = []

    def on_train_begin(self, args, state, control, **kwargs):
        # resumed at step N: the rows logged up to N by the run that saved the checkpoint are history
        # this run continues, not a log to start afresh (the file is rewritten from self.rows)
        if state.global_step > 0 and not self.rows and self.path.is_file():
            from evalsuite.safeio import read_jsonl_records

            self.rows = [r for r in read_jsonl_records(self.path, "metrics log")
                         if isinstance(r.get("step"), int) and r["step"] <= state.global_step
                         and "train_runtime" not in r]   # an earlier train() call's closing summary

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        from evalsuite.files import write_jsonl_atomic

        self.rows.append({"step": state.global_step, "epoch": state.epoch, **logs})
        # Under DDP every rank logs the same gathered values; ranks > 0 keep their own file so a run
        # can be checked for agreement, and the main file stays single-writer.
        path = self.path if state.is_world_process_zero else self.path.with_name(
            f"{self.path.stem}.rank{args.process_index}{self.path.suffix}")
        write_jsonl_atomic(path, self.rows)


def with_line_progress(trainer):
    """The Trainer's progress bar through evalsuite/progress.py: a tqdm bar on a terminal, a line per tenth
    of the steps (and the logged losses) in a log file, not thousands of redraws."""
    from transformers.trainer_callback import ProgressCallback

    from evalsuite.progress import progress_bar

    class LineProgressCallback(ProgressCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                self.training_bar = progress_bar(total=state.max_steps, desc="train", unit="step")
            self.current_step = 0

    if any(isinstance(cb, ProgressCallback) for cb in trainer.callback_handler.callbacks):  # not with disable_tqdm
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(LineProgressCallback())
    return trainer


def _last_metrics(trainer) -> dict:
    for cb in trainer.callback_handler.callbacks:
        if isinstance(cb, JsonLogCallback):
            train_rows = [r for r in cb.rows if "loss" in r]
            return {"log": str(cb.path), "first": train_rows[0] if train_rows else None,
                    "last": train_rows[-1] if train_rows else None}
    return {}


def finish_training(trainer, cfg, processor, info: dict, method: str) -> Path:
    """Save the adapter (if any), then on the main process merge it into a full checkpoint + manifest
    (a LoRA adapter in float32 into the base's own weights, saved in `merge_dtype`: training/checkpoint.py).
    Returns what was written last: the merged checkpoint; with `save_merged false` the adapter dir, or
    OUTPUT_DIR/model (the fully fine-tuned weights, saved by the Trainer) when there is no adapter.

    Under ZeRO-3 the weights are sharded across ranks; merge from OUTPUT_DIR/adapter in a separate
    single process instead (`--save_merged false` here).
    """
    from accelerate.utils import is_peft_model

    from training.checkpoint import save_checkpoint

    acc = trainer.accelerator
    out = Path(cfg.output_dir)
    if is_peft_model(acc.unwrap_model(trainer.model)):
        out = out / "adapter"
        trainer.save_model(str(out))
    elif not cfg.save_merged:
        # a full fine-tune without the merge step (ZeRO-3: the weights are sharded, save_checkpoint cannot
        # gather them) would otherwise keep no final weights at all under save_strategy no: the Trainer
        # gathers and saves them (safetensors), with the processor, so OUTPUT_DIR/model loads as a checkpoint
        out = out / "model"
        trainer.save_model(str(out))
        if processor is not None and acc.is_main_process:
            processor.save_pretrained(str(out))
    if cfg.save_merged:
        out = cfg.merged_path
    acc.wait_for_everyone()
    if cfg.save_merged and acc.is_main_process:
        model = acc.unwrap_model(trainer.model)
        model.eval()
        save_checkpoint(model, processor, out, iteration=cfg.iteration,
                        parent=cfg.parent or cfg.model_name_or_path, method=method, config=cfg.resolved(),
                        data_hash=info.get("data_hash"), extra={"data": info, "metrics": _last_metrics(trainer)},
                        base=cfg.model_name_or_path, merge_dtype=cfg.merge_dtype,
                        trust_remote_code=cfg.trust_remote_code, lora_merge=cfg.lora_merge)
    acc.wait_for_everyone()
    return out
