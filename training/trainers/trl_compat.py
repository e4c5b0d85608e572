"""Every TRL internal the trainers rely on, in one module: the names below are not TRL's public API
(`DPOConfig`, `DPOTrainer`, `SFTConfig`, `SFTTrainer` and their documented arguments) and may change
in any minor release. tests/unit/test_trl_compat.py checks that each exists and behaves as used in
the installed TRL; pyproject.toml pins TRL to the versions that test has passed on (TESTED_TRL).

Touchpoints (all used by training/trainers/dpo.py):
- `trl.trainer.utils.use_adapter(model, adapter_name)`: a context that activates one PEFT adapter,
  or disables all of them with None (the reference pass of a LoRA policy);
- REF_ADAPTER: the name of the frozen copy TRL adds when given a pre-wrapped PeftModel;
- `trl.models.utils.disable_gradient_checkpointing(model, kwargs)`: a context for the reference pass;
- the fused LM head that DPOTrainer's init patches into the model (`trl.trainer.utils.add_fused_lm_head`):
  `model(..., labels=L, fused_lm_head=True).log_probs` = per-token log-probs of L[:, 1:], without
  materialising the logits;
- `DPOTrainer._metrics[mode]`: the dict of lists TRL averages into every logged row.
"""
from __future__ import annotations

import contextlib

TESTED_TRL = "1.16.0"  # the version in constraints.txt, which the suite runs on
REF_ADAPTER = "ref"


def use_adapter(model, adapter_name: str | None) -> contextlib.AbstractContextManager:
    from trl.trainer.utils import use_adapter as _use_adapter

    return _use_adapter(model, adapter_name=adapter_name)


def reference_adapter_context(model) -> contextlib.AbstractContextManager:
    """The reference policy of a PEFT model: TRL's frozen 'ref' copy if it made one, else the base
    model with every adapter disabled."""
    return use_adapter(model, REF_ADAPTER if REF_ADAPTER in model.peft_config else None)


def disable_gradient_checkpointing(model, kwargs: dict | None) -> contextlib.AbstractContextManager:
    from trl.models.utils import disable_gradient_checkpointing as _disable

    return _disable(model, kwargs)


def fused_log_probs(model, inputs: dict, labels):
    """Per-token log-probs (B, L-1) of `labels[:, 1:]` through TRL's fused LM head (positions whose
    label is -100 come back as 0)."""
    return model(**inputs, labels=labels, use_cache=False, fused_lm_head=True).log_probs


def metrics(trainer, mode: str) -> dict[str, list]:
    """The per-mode ('train' | 'eval') lists TRL's `log` averages and clears: append to add a metric."""
    return trainer._metrics[mode]
