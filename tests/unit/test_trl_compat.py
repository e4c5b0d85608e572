"""Each TRL internal training/trainers/trl_compat.py relies on exists and behaves as used, in the installed
TRL; the pin in pyproject.toml covers the versions this test has passed on."""
from __future__ import annotations

import contextlib
import inspect
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_private_names_exist_with_the_signatures_used():
    from trl.models.utils import disable_gradient_checkpointing
    from trl.trainer.utils import add_fused_lm_head, use_adapter

    assert list(inspect.signature(use_adapter).parameters) == ["model", "adapter_name"]
    assert list(inspect.signature(disable_gradient_checkpointing).parameters)[:2] == [
        "model", "gradient_checkpointing_kwargs"]
    assert "outputs" in inspect.signature(add_fused_lm_head).parameters


def test_installed_trl_is_the_tested_one_and_inside_the_pin():
    """TESTED_TRL is what constraints.txt installs, and pyproject's range starts at it."""
    import trl

    from training.trainers.trl_compat import TESTED_TRL

    assert trl.__version__ == TESTED_TRL
    assert f"trl=={TESTED_TRL}" in (REPO / "constraints.txt").read_text().splitlines()
    pin = re.search(r'"trl>=([0-9.]+),<([0-9.]+)"', (REPO / "pyproject.toml").read_text())
    assert pin, "pyproject.toml: no trl>=X,<Y pin"
    lower = tuple(int(x) for x in pin.group(1).split("."))
    assert lower == tuple(int(x) for x in TESTED_TRL.split("."))[:len(lower)]


@pytest.fixture(scope="module")
def trainer(tiny_vlm_dir, tmp_path_factory):
    """A DPOTrainer on the tiny LLaVA, given a pre-wrapped LoRA model (so TRL adds its reference copy)."""
    import datasets
    from peft import LoraConfig, get_peft_model
    from PIL import Image
    from transformers import AutoProcessor, LlavaForConditionalGeneration
    from trl import DPOConfig, DPOTrainer

    model = LlavaForConditionalGeneration.from_pretrained(tiny_vlm_dir)
    processor = AutoProcessor.from_pretrained(tiny_vlm_dir)
    model = get_peft_model(model, LoraConfig(r=2, target_modules=r".*language_model.*\.(q_proj|v_proj)"))
    img = Image.new("RGB", (32, 32), "red")
    ds = datasets.Dataset.from_list([{"images": [img], "prompt": "describe.", "chosen": "a red square",
                                      "rejected": "a blue circle"}] * 2)
    args = DPOConfig(output_dir=str(tmp_path_factory.mktemp("trl")), use_cpu=True, bf16=False, report_to="none",
                     activation_checkpointing=False, gradient_checkpointing=None, max_length=None)
    return DPOTrainer(model=model, args=args, train_dataset=ds, processing_class=processor), processor


def test_reference_adapter_and_metrics_dict(trainer):
    from training.trainers import trl_compat

    tr, _ = trainer
    assert trl_compat.REF_ADAPTER in tr.model.peft_config  # TRL's frozen copy of "default"
    m = trl_compat.metrics(tr, "train")
    m["evalsuite/probe"].append(1.0)  # a defaultdict(list) TRL averages into the next logged row
    assert tr._metrics["train"]["evalsuite/probe"] == [1.0] and set(tr._metrics) == {"train", "eval"}
    m.pop("evalsuite/probe")
    with trl_compat.reference_adapter_context(tr.model):
        assert tr.model.active_adapter == trl_compat.REF_ADAPTER
    with trl_compat.use_adapter(tr.model, None):
        pass
    gc_ctx = trl_compat.disable_gradient_checkpointing(tr.model, None)
    assert isinstance(gc_ctx, contextlib.AbstractContextManager)
    with gc_ctx:
        pass


def test_fused_head_gives_the_log_probs_of_the_labels(trainer):
    """`fused_lm_head=True` (patched in by DPOTrainer) = log_softmax of the plain logits at the next token."""
    import torch
    from PIL import Image

    from training.trainers import trl_compat

    tr, processor = trainer
    model = tr.model.eval()
    enc = processor(images=[Image.new("RGB", (32, 32), "blue")] * 2,
                    text=["USER: <image>\ndescribe. ASSISTANT: a blue square", "USER: <image>\nwhat? ASSISTANT: no"],
                    padding=True, return_tensors="pt")
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    labels[:, :5] = -100
    with torch.no_grad():
        fused = trl_compat.fused_log_probs(model, dict(enc), labels)
        logits = model(**enc, use_cache=False).logits
    ref = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, labels[:, 1:].clamp(min=0).unsqueeze(-1)).squeeze(-1)
    mask = labels[:, 1:] != -100
    assert fused.shape == labels[:, 1:].shape
    assert torch.allclose(fused[mask], ref[mask], atol=1e-5)
