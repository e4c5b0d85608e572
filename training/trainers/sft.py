"""Supervised fine-tuning of a VLM on TRL 1.16's SFTTrainer with evalsuite's conversation collator.

    python training/train.py --config configs/train/tiny_cpu.yaml --method sft --dataset_name vlquery_json --data_path sft.json

Only assistant turns are labelled (`SFTCollator`). `model_name_or_path` may be any local VLM dir,
including a freshly built random-init tiny checkpoint (the demo's SFT-from-scratch stage), in which
case `use_lora false` trains every weight. `run_sft(cfg) -> Path` returns the full checkpoint dir.
"""
from __future__ import annotations

import logging
from pathlib import Path

from trl import SFTConfig, SFTTrainer

from training.trainers.common import JsonLogCallback, finish_training, trainer_args, with_line_progress

log = logging.getLogger(__name__)


class VLSFTTrainer(SFTTrainer):
    """SFTTrainer whose loss takes the plain path (the model's own loss on the collator's labels) where TRL's
    fused LM head does not fit the model (`training.trainers.model.fused_head_fits`: BLIP-2, InstructBLIP)."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        from training.trainers.model import fused_head_fits

        if fused_head_fits(self.accelerator.unwrap_model(model)):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        outputs = model(**inputs)
        return (outputs.loss, outputs) if return_outputs else outputs.loss


def build_sft_trainer(cfg, model, processor, train_ds, eval_ds=None) -> SFTTrainer:
    from training.trainers.collate import SFTCollator
    from training.trainers.model import lora_config

    args = SFTConfig(**trainer_args(cfg), max_length=None, dataset_num_proc=cfg.dataset_num_proc,
                     dataset_kwargs={"skip_prepare_dataset": True})  # SFTCollator tokenises on the fly
    collator = SFTCollator(processor, max_length=cfg.max_length, max_prompt_length=cfg.max_prompt_length,
                           max_target_length=cfg.max_target_length, label_pad_token_id=cfg.label_pad_token_id,
                           truncation=cfg.truncation, inputs=cfg.input_config(),
                           eos_every_turn=cfg.chat_format != "vlrlhf_llava")
    return with_line_progress(VLSFTTrainer(
        model=model, args=args, data_collator=collator, train_dataset=train_ds, eval_dataset=eval_ds,
        processing_class=processor, peft_config=lora_config(cfg, model),
        callbacks=[JsonLogCallback(Path(cfg.output_dir) / "metrics.jsonl")]))


def run_sft(cfg, hint: str | None = None) -> Path:
    """Train cfg (a validated TrainConfig, method sft) and return the full checkpoint directory (with
    save_merged false what was written instead: common.py `finish_training`). `hint`: how
    to continue after a signal's save, for the one line (default: training/signals.py `signal_hint`)."""
    from training.config import resume_checkpoint
    from training.data import load_examples
    from training.trainers.model import load_model_and_processor, setup_reporting

    from training.outdir import owned_output_dir
    from training.signals import save_on_signal, signal_hint

    with owned_output_dir(cfg):   # one run per output_dir: locked, another run's folder refused
        setup_reporting(cfg)
        train_ds, eval_ds, info = load_examples(cfg)
        model, processor = load_model_and_processor(cfg)
        trainer = build_sft_trainer(cfg, model, processor, train_ds, eval_ds)
        with save_on_signal(trainer, cfg.save_on_signal, signal_hint(cfg) if hint is None else hint):  # 1st SIGTERM/SIGINT: save, exit
            trainer.train(resume_from_checkpoint=resume_checkpoint(cfg))
        return finish_training(trainer, cfg, processor, info, method="sft")

