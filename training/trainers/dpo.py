"""DPO-family training of a VLM on TRL 1.16's DPOTrainer, with evalsuite's losses and collator.

    python training/train.py --config configs/train/tiny_cpu.yaml --loss_type ddpo

The subclass keeps TRL's engine (fused LM head, PEFT reference = adapter disabled, accelerate,
logging; the TRL internals it touches are in training/trainers/trl_compat.py) and replaces only the
loss computation, so every loss in `training.losses.LOSSES` (incl.
kto_pair and ddpo, which TRL 1.16 lacks) is one spec lookup (`loss_spec`, with VL-RLHF's summed
log-probs for ipo and its DDPO mask unless `ipo_logps` / `ddpo_mask` say otherwise). It also adds what TRL refuses for
vision data: reference log-probs computed once before training (`--precompute_ref_log_probs`).

`run_dpo(cfg) -> Path` is the API the CSR loop calls once per iteration: it returns the merged
checkpoint dir, whose manifest names `cfg.parent or cfg.model_name_or_path` as parent.
"""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import torch
from trl import DPOConfig, DPOTrainer

from training.losses import LossSpec, loss_spec, rpo_nll, sequence_logps
from training.trainers import trl_compat
from training.trainers.common import JsonLogCallback, finish_training, trainer_args, with_line_progress

log = logging.getLogger(__name__)

_NON_MODEL_KEYS = {"completion_mask", "logp_mask", "ref_chosen_logps", "ref_rejected_logps"}


class VLDPOTrainer(DPOTrainer):
    """DPOTrainer whose loss is a `LossSpec`, fed by `PreferenceCollator` batches."""

    def __init__(self, *args, loss_spec: LossSpec, label_smoothing: float = 0.0, rpo_alpha: float = 0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_spec = loss_spec
        self.smoothing = label_smoothing
        self.rpo_alpha = rpo_alpha

    def _reference_context(self):
        if self.ref_model is None and _is_peft(self.model):
            return trl_compat.reference_adapter_context(self.accelerator.unwrap_model(self.model))
        return contextlib.nullcontext()

    def _sequence_logps(self, model, inputs) -> torch.Tensor:
        """Per-row sequence log-probs (sum, mean or diff-masked sum per the loss spec)."""
        kwargs = {k: v for k, v in inputs.items() if k not in _NON_MODEL_KEYS}
        mask = inputs["logp_mask"][:, 1:]  # log_probs[t] scores token t+1
        from training.trainers.model import fused_head_fits

        if fused_head_fits(self.accelerator.unwrap_model(model)):
            labels = inputs["input_ids"].masked_fill(inputs["completion_mask"] == 0, -100)
            per_token = trl_compat.fused_log_probs(model, kwargs, labels)[:, -mask.size(1):]
        else:  # the plain path: full logits, then the log-prob of each next token
            logits = model(**kwargs, use_cache=False).logits[:, -mask.size(1) - 1:-1].float()
            target = inputs["input_ids"][:, 1:].unsqueeze(-1)
            per_token = torch.log_softmax(logits, -1).gather(-1, target).squeeze(-1)
        return sequence_logps(per_token, mask, average=self.loss_spec.average_logps)

    @torch.no_grad()
    def reference_logps(self, inputs) -> tuple[torch.Tensor, torch.Tensor]:
        model = self.ref_model if self.ref_model is not None else self.model
        with trl_compat.disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs), \
                self._reference_context(), self.accelerator.autocast():
            logps = self._sequence_logps(model, inputs)
        return logps.chunk(2, dim=0)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # the public Trainer hook (TRL's own override only adds a hint for a max_length we never set)
        mode = "train" if self.model.training else "eval"
        chosen, rejected = self._sequence_logps(model, inputs).chunk(2, dim=0)
        if "ref_chosen_logps" in inputs:
            ref_chosen, ref_rejected = inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]
        else:
            ref_chosen, ref_rejected = self.reference_logps(inputs)
        c, r = chosen - ref_chosen, rejected - ref_rejected
        loss = self.loss_spec.fn(c, r, beta=self.args.beta, label_smoothing=self.smoothing).mean()
        if self.rpo_alpha:
            chosen_tokens = inputs["logp_mask"][:, 1:].sum(1).chunk(2, dim=0)[0]
            loss = loss + self.rpo_alpha * rpo_nll(chosen, chosen_tokens, self.loss_spec.average_logps)
        self._log_pair_metrics(mode, c.detach(), r.detach(), chosen.detach(), rejected.detach())
        if return_outputs:
            return loss, {"chosen_logps": chosen, "rejected_logps": rejected}
        return loss

    def _log_pair_metrics(self, mode, c, r, chosen, rejected) -> None:
        gather = self.accelerator.gather_for_metrics
        rc, rr = gather(self.args.beta * c), gather(self.args.beta * r)
        m = trl_compat.metrics(self, mode)
        m["rewards/chosen"].append(rc.mean().item())
        m["rewards/rejected"].append(rr.mean().item())
        m["rewards/margins"].append((rc - rr).mean().item())
        m["rewards/accuracies"].append((rc > rr).float().mean().item())
        m["logps/chosen"].append(gather(chosen).mean().item())
        m["logps/rejected"].append(gather(rejected).mean().item())

    def precompute_reference(self, dataset, batch_size: int | None = None):
        """Add ref_chosen_logps / ref_rejected_logps columns: one adapter-disabled pass, before training.

        Runs on the unwrapped model before `train()` wraps it; each rank scores the whole dataset,
        so every rank holds the same columns whatever sampler order DDP picks.
        """
        from torch.utils.data import DataLoader

        from evalsuite.progress import progress_bar

        bs = batch_size or self.args.per_device_train_batch_size
        loader = DataLoader(dataset, batch_size=bs, shuffle=False, collate_fn=self.data_collator)
        was_training = self.model.training
        self.model.eval()  # no dropout in the reference pass, as in a frozen reference model
        chosen, rejected = [], []
        device = self.accelerator.device
        for batch in progress_bar(loader, desc="reference log-probs", disable=not self.accelerator.is_main_process):
            batch = {k: v.to(device) for k, v in batch.items()}
            c, r = self.reference_logps(batch)
            chosen += c.float().cpu().tolist()
            rejected += r.float().cpu().tolist()
        self.model.train(was_training)
        return dataset.add_column("ref_chosen_logps", chosen).add_column("ref_rejected_logps", rejected)


def _is_peft(model) -> bool:
    from accelerate.utils import is_peft_model

    return is_peft_model(model)


def build_dpo_trainer(cfg, model, processor, train_ds, eval_ds=None) -> VLDPOTrainer:
    """The trainer for cfg (no training yet); the LoRA adapter, if any, is attached by TRL here."""
    from training.trainers.collate import PreferenceCollator
    from training.trainers.model import lora_config

    spec = loss_spec(cfg.loss_type, cfg.ipo_logps, cfg.ddpo_mask)
    args = DPOConfig(**trainer_args(cfg), beta=cfg.beta, label_smoothing=cfg.label_smoothing,
                     loss_type=["sigmoid"],  # unused: VLDPOTrainer computes cfg.loss_type itself
                     max_length=None, precompute_ref_log_probs=False, dataset_num_proc=cfg.dataset_num_proc)
    collator = PreferenceCollator(processor, max_length=cfg.max_length, max_prompt_length=cfg.max_prompt_length,
                                  max_target_length=cfg.max_target_length, diff_mask=spec.diff_mask,
                                  truncation=cfg.truncation, inputs=cfg.input_config())
    return with_line_progress(VLDPOTrainer(
        model=model, args=args, data_collator=collator, train_dataset=train_ds, eval_dataset=eval_ds,
        processing_class=processor, peft_config=lora_config(cfg, model), loss_spec=spec,
        label_smoothing=cfg.label_smoothing, rpo_alpha=cfg.rpo_alpha, callbacks=[JsonLogCallback(Path(cfg.output_dir) / "metrics.jsonl")],
    ))


def run_dpo(cfg) -> Path:
    """Train cfg (a validated TrainConfig) and return the merged checkpoint directory (with
    save_merged false what was written instead: common.py `finish_training`)."""
    from training.config import resume_checkpoint
    from training.data import load_examples
    from training.trainers.model import load_model_and_processor, setup_reporting

    from training.outdir import owned_output_dir
    from training.signals import save_on_signal, signal_hint

    with owned_output_dir(cfg):   # one run per output_dir: locked, another run's folder refused
        setup_reporting(cfg)
        train_ds, eval_ds, info = load_examples(cfg)
        model, processor = load_model_and_processor(cfg)
        trainer = build_dpo_trainer(cfg, model, processor, train_ds, eval_ds)
        if cfg.precompute_ref_log_probs:
            trainer.train_dataset = trainer.precompute_reference(trainer.train_dataset)
            if trainer.eval_dataset is not None:
                trainer.eval_dataset = trainer.precompute_reference(trainer.eval_dataset)
        with save_on_signal(trainer, cfg.save_on_signal, signal_hint(cfg)):  # 1st SIGTERM/SIGINT: save, exit
            trainer.train(resume_from_checkpoint=resume_checkpoint(cfg))
        return finish_training(trainer, cfg, processor, info, method="csr" if cfg.method == "csr" else "dpo")

