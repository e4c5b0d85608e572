"""training/train.py end to end on the tiny LLaVA + synthetic world (CPU, a few LoRA steps each).

Step-0 values (LoRA B = 0, so policy == reference and c = r = 0): sigmoid/ddpo ln 2 = 0.693147,
hinge 1, ipo (1/(2 * 0.1))^2 = 25, kto_pair 1 - sigmoid(0) = 0.5.
"""
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from training.train import main as train_main

REPO = Path(__file__).resolve().parents[2]
TINY_YAML = str(REPO / "configs" / "train" / "tiny_cpu.yaml")
STEP0 = {"sigmoid": math.log(2), "ddpo": math.log(2), "hinge": 1.0, "ipo": 25.0, "kto_pair": 0.5}


def _captions(world):
    caps = json.loads((world / "annotations" / "captions_train.json").read_text())
    files = {im["id"]: f"images/train/{im['file_name']}" for im in caps["images"]}
    first = {}
    for a in caps["annotations"]:
        first.setdefault(a["image_id"], a["caption"])
    return [(files[i], c) for i, c in sorted(first.items())]


@pytest.fixture(scope="module")
def data(world_dir, tmp_path_factory):
    """Pairs: chosen = the image's caption, rejected = the next image's caption; SFT = captions."""
    d = tmp_path_factory.mktemp("traindata")
    caps = _captions(world_dir)[:8]
    pairs = [{"image": img, "prompt": "describe the image.", "chosen": cap, "rejected": caps[(i + 1) % len(caps)][1]}
             for i, (img, cap) in enumerate(caps)]
    (d / "pairs.json").write_text(json.dumps(pairs))
    sft = [{"image": img, "conversations": [{"from": "user", "value": "<image>\ndescribe the image."},
                                            {"from": "assistant", "value": cap}]} for img, cap in caps]
    (d / "sft.json").write_text(json.dumps(sft))
    return d


def base_args(tiny_vlm_dir, world_dir, data, out, *extra):
    return ["--config", TINY_YAML, "--model_name_or_path", str(tiny_vlm_dir), "--data_path", str(data / "pairs.json"),
            "--image_root", str(world_dir), "--output_dir", str(out), *extra]


def metrics(out):
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("loss", sorted(STEP0))
def test_dpo_each_loss(loss, tiny_vlm_dir, world_dir, data, tmp_path):
    out = tmp_path / loss
    assert train_main(base_args(tiny_vlm_dir, world_dir, data, out, "--loss_type", loss, "--iteration", "3")) == 0
    rows = [r for r in metrics(out) if "loss" in r]
    assert len(rows) == 2
    assert rows[0]["loss"] == pytest.approx(STEP0[loss], rel=1e-5)
    assert rows[0]["rewards/chosen"] == 0.0 and rows[0]["rewards/margins"] == 0.0
    man = json.loads((out / "merged" / "evalsuite.json").read_text())
    assert (man["parent"], man["method"], man["iteration"]) == (str(tiny_vlm_dir), "dpo", 3)
    assert man["config"]["loss_type"] == loss and man["data_hash"] and "model.safetensors" in man["weights"]
    assert (out / "adapter" / "adapter_model.safetensors").is_file()


def test_every_lora_parameter_changes_and_merge_reloads(tiny_vlm_dir, world_dir, data, tmp_path):
    import torch

    from evalsuite.gen_settings import GenConfig
    from evalsuite.models.vlm import generate, load_vlm
    from evalsuite.types import GenRequest
    from training.config import load_config
    from training.data import load_examples
    from training.trainers.common import finish_training
    from training.trainers.dpo import build_dpo_trainer
    from training.trainers.model import load_model_and_processor

    cfg = load_config(base_args(tiny_vlm_dir, world_dir, data, tmp_path / "o", "--max_steps", "3"))
    train_ds, _, info = load_examples(cfg)
    model, processor = load_model_and_processor(cfg)
    trainer = build_dpo_trainer(cfg, model, processor, train_ds)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert before and all("lora_" in n for n in before)
    assert not any("vision_tower" in n or "projector" in n for n in before)  # auto = language model only
    trainer.train()
    after = dict(trainer.model.named_parameters())
    unchanged = [n for n, p in before.items() if torch.equal(p, after[n].detach())]
    assert unchanged == []
    out = finish_training(trainer, cfg, processor, info, method="dpo")
    vlm = load_vlm(out, device="cpu")
    base = load_vlm(tiny_vlm_dir, device="cpu")
    sd, sb = vlm.model.state_dict(), base.model.state_dict()
    assert any(not torch.equal(sd[k], sb[k]) for k in sb if "language_model" in k)
    assert all(torch.equal(sd[k], sb[k]) for k in sb if "vision_tower" in k)
    img = world_dir / _captions(world_dir)[0][0]
    answers = generate(vlm, [GenRequest("k", str(img), "describe the image.")], GenConfig(max_new_tokens=6),
                       progress=False)
    assert len(answers) == 1 and isinstance(answers[0], str)


def test_precomputed_reference_gives_the_same_losses(tiny_vlm_dir, world_dir, data, tmp_path):
    """Reference log-probs from the one-off pass equal the per-step adapter-disabled pass."""
    a, b = tmp_path / "a", tmp_path / "b"
    assert train_main(base_args(tiny_vlm_dir, world_dir, data, a, "--save_merged", "false")) == 0
    assert train_main(base_args(tiny_vlm_dir, world_dir, data, b, "--save_merged", "false",
                                "--precompute_ref_log_probs", "true")) == 0
    la = [r["loss"] for r in metrics(a) if "loss" in r]
    lb = [r["loss"] for r in metrics(b) if "loss" in r]
    assert la == pytest.approx(lb, rel=1e-5) and len(la) == 2


def test_sft_from_scratch_full_finetune(tiny_vlm_dir, world_dir, data, tmp_path):
    out = tmp_path / "sft"
    argv = base_args(tiny_vlm_dir, world_dir, data, out, "--method", "sft", "--dataset_name", "vlquery_json",
                     "--data_path", str(data / "sft.json"), "--use_lora", "false", "--learning_rate", "0.003",
                     "--max_steps", "4", "--per_device_train_batch_size", "4")
    assert train_main(argv) == 0
    losses = [r["loss"] for r in metrics(out) if "loss" in r]
    assert len(losses) == 4 and losses[-1] < losses[0]
    man = json.loads((out / "merged" / "evalsuite.json").read_text())
    assert man["method"] == "sft" and man["parent"] == str(tiny_vlm_dir)
    assert not (out / "adapter").exists()


def test_wandb_offline(tiny_vlm_dir, world_dir, data, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    # the run sets these in this process' environment (training/trainers/model.py); monkeypatch removes
    # them again at the end: a later test in this worker would otherwise inherit this test's WANDB_DIR
    for var in ("WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT", "WANDB_RUN_GROUP"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "wb"
    assert train_main(base_args(tiny_vlm_dir, world_dir, data, out, "--report_to", "wandb", "--save_merged", "false",
                                "--project_name", "evalsuite-test", "--group_name", "g")) == 0
    assert list((out / "wandb").glob("offline-run-*"))


def test_tensorboard_logs(tiny_vlm_dir, world_dir, data, tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "tb"
    assert train_main(base_args(tiny_vlm_dir, world_dir, data, out, "--report_to", "tensorboard",
                                "--save_merged", "false")) == 0
    assert list(out.rglob("events.out.tfevents.*"))


@pytest.mark.parametrize("record, extra, msg", [
    ({"image": "../../../etc/passwd"}, [], "escapes the image root"),
    (None, [], "bad.json:1: not valid JSON"),
    ({}, ["--dataset_name", "nope"], "dataset_name: 'nope'"),
    ({"chosen": 3}, [], r"\[0\]: field 'chosen'"),
])
def test_bad_input_is_one_line_exit_2(record, extra, msg, tiny_vlm_dir, world_dir, data, tmp_path, capsys):
    f = tmp_path / "bad.json"
    if record is None:
        f.write_text('[{"prompt": "x",')
    else:
        f.write_text(json.dumps([{"image": "images/train/x.png", "prompt": "q", "chosen": "a", "rejected": "b",
                                  **record}]))
    argv = base_args(tiny_vlm_dir, world_dir, data, tmp_path / "o", "--data_path", str(f), *extra)
    assert train_main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("train.py:")]
    assert len(err) == 1
    assert re.search(msg, err[0]), err[0]
    assert not (tmp_path / "o" / "metrics.jsonl").exists()  # failed before training


def test_cli_subprocess(tiny_vlm_dir, world_dir, data, tmp_path):
    """The documented command line, in a fresh process."""
    out = tmp_path / "cli"
    r = subprocess.run([sys.executable, str(REPO / "training" / "train.py"),
                        *base_args(tiny_vlm_dir, world_dir, data, out, "--loss_type", "ddpo")],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == str(out / "merged")
