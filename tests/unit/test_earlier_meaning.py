"""Switches added after runs and results existed (lora_scope, lora_merge, sft_split, tree.junk_rules,
pairs.tie_order) keep unchanged settings the same run and the same result keys: an old output folder's
marker without them means what runs did before (training/config.py EARLIER_MEANING), and identities
leave them out at that value. A CSR run merges as CSR does unless told."""
from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _train_cfg(tmp_path, **kw):
    from training.config import build_train_config

    data = {"model_name_or_path": str(tmp_path / "m"), "output_dir": str(tmp_path / "out"), "method": "dpo",
            "dataset_name": "plain_dpo", "data_path": str(tmp_path / "p.json"), "use_lora": True, **kw}
    return build_train_config(data, portable=True)


def _old_marker(out: Path, cfg) -> None:
    """train_run.json as the previous release wrote it: today's fingerprint less the new switches."""
    from training.outdir import MARKER, _fingerprint

    old = {k: v for k, v in _fingerprint(cfg).items() if k not in ("lora_scope", "lora_merge", "sft_split")}
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text(json.dumps({"config": old}))


def test_an_old_marker_is_the_same_run_when_the_settings_mean_what_they_did(tmp_path):
    from training.outdir import same_run_config

    cfg = _train_cfg(tmp_path, lora_scope="language_model")  # what every run did before the switch
    _old_marker(tmp_path / "out", cfg)
    assert same_run_config(tmp_path / "out", cfg) == (True, "")


def test_an_old_marker_is_another_run_under_the_released_lora_rule(tmp_path):
    from training.outdir import same_run_config

    _old_marker(tmp_path / "out", _train_cfg(tmp_path, lora_scope="language_model"))
    same, why = same_run_config(tmp_path / "out", _train_cfg(tmp_path))  # default: released (CLIP q/k/v too)
    assert not same and "lora_scope" in why


def test_csr_train_identity_leaves_out_the_earlier_meaning():
    from training.csr.train_log import train_result

    rows = [{"step": 1, "loss": 0.5}]
    old = {"use_lora": True, "lora_r": 32}
    same = train_result(rows, 1, {**old, "lora_scope": "language_model", "lora_merge": "all"})
    assert same.identity == {"train": old}  # the key the previous release stored for these settings
    assert train_result(rows, 1, {**old, "lora_scope": "released"}).identity == {
        "train": {**old, "lora_scope": "released"}}


def test_pair_identity_of_the_demo_preset_has_no_new_switch(tmp_path):
    from training.csr.loop import pairs_identity
    from training.demo import DemoConfig

    demo = DemoConfig.from_yaml(REPO / "configs" / "demo_tiny.yaml")
    for name in ("prompts.jsonl", "base", "judge", "world"):
        (tmp_path / name).mkdir() if "." not in name else (tmp_path / name).write_text("")
    ident = pairs_identity(demo.csr_config(tmp_path / "prompts.jsonl", tmp_path / "base", tmp_path / "judge",
                                           tmp_path / "world"))
    assert "junk_rules" not in ident["tree"] and "tie_order" not in ident["pairs"]


def test_a_csr_run_merges_as_csr_does_unless_told(tmp_path):
    from training.csr.config import load_config

    def merge(*overrides):
        cfg = load_config(REPO / "configs" / "csr_tiny.yaml", list(overrides))
        return cfg.train_config("m", 1, tmp_path / "iter_1", portable=True).lora_merge

    assert merge("train.lora_scope=released") == "language_model"     # CLIP's LoRA is not merged, as CSR's merge
    assert merge("train.lora_scope=released", "train.lora_merge=all") == "all"
    assert merge() == "all"  # csr_tiny: LoRA on the language model only, where both merges are one (as before)


def test_a_full_finetune_is_the_same_run_whatever_lora_settings_say(tmp_path):
    """An SFT stage without LoRA (the demo's) written before lora_scope existed is the same run."""
    from training.outdir import same_run_config

    cfg = _train_cfg(tmp_path, method="sft", dataset_name="vlquery_json", use_lora=False, sft_split="held_out")
    _old_marker(tmp_path / "out", cfg)
    assert same_run_config(tmp_path / "out", cfg) == (True, "")


def test_csr_train_settings_name_the_lora_rule_a_preset_left_to_the_default(tmp_path):
    """A CSR preset with LoRA that names no lora_scope now trains under the released rule: its csr_train
    identity says so (it must not share the key of results trained before the switch existed)."""
    from training.csr.config import load_config
    from training.csr.train_log import train_result, train_settings

    rows = [{"step": 1, "loss": 0.5}]
    tiny = load_config(REPO / "configs" / "csr_tiny.yaml")  # names lora_scope language_model: as before
    from training.outdir import TRAIN_SCHEDULING   # settings of when checkpoints and logs are written: not in it

    assert train_result(rows, 1, train_settings(tiny, "m", 1, tmp_path)).identity == {
        "train": {k: v for k, v in tiny.train.items() if k != "lora_scope" and k not in TRAIN_SCHEDULING}}
    bare = load_config(REPO / "configs" / "csr_tiny.yaml")
    bare.train.pop("lora_scope")
    ident = train_result(rows, 1, train_settings(bare, "m", 1, tmp_path)).identity["train"]
    assert (ident["lora_scope"], ident["lora_merge"]) == ("released", "language_model")
