"""One identity rule (issue 34): settings that give the same results (identity=False) are no part of the pair
statistics', the training statistics' or an evaluation's resume identity; every other setting is."""
from __future__ import annotations

import pytest

from tests.conftest import REPO


def _pairs_identity(tmp_path, *overrides):
    from training.csr.config import load_config
    from training.csr.loop import pairs_identity

    for name in ("base", "judge", "images"):
        (tmp_path / name).mkdir(exist_ok=True)
    (tmp_path / "prompts.jsonl").write_text('{"id": 1, "image": "a.png", "question": "q"}\n')
    cfg = load_config(REPO / "configs" / "csr_tiny.yaml", [
        f"model={tmp_path / 'base'}", f"clip={tmp_path / 'judge'}", f"prompts={tmp_path / 'prompts.jsonl'}",
        f"image_root={tmp_path / 'images'}", *overrides])
    return pairs_identity(cfg)


@pytest.mark.parametrize("change", ["tree.batch_nodes=3", "tree.prompt_batch=1", "tree.kv_budget=2048", "tree.share_prefix=false",
                                    "reward.clip_batch=2", "reward.lm_batch=5"])
def test_scheduling_settings_keep_the_pairs_identity(tmp_path, change):
    assert _pairs_identity(tmp_path, change) == _pairs_identity(tmp_path)


def test_engines_that_grow_the_same_trees_share_it_vllm_does_not(tmp_path):
    base = _pairs_identity(tmp_path)
    assert _pairs_identity(tmp_path, "tree.engine=reference") == base
    assert _pairs_identity(tmp_path, "tree.engine=vllm")["tree"]["engine"] == "vllm"


@pytest.mark.parametrize("change", ["tree.num_beams=4", "tree.max_depth=2", "reward.lam=0.5", "pairs.min_paths=3"])
def test_result_settings_change_the_pairs_identity(tmp_path, change):
    if change == "tree.num_beams=4":
        change = [change, "tree.num_beam_groups=4"]
    assert _pairs_identity(tmp_path, *([change] if isinstance(change, str) else change)) != _pairs_identity(tmp_path)


def test_training_stats_identity_leaves_out_checkpoint_scheduling():
    from training.csr.train_log import train_result

    rows = [{"loss": 0.7, "step": 1}]
    base = {"use_lora": True, "learning_rate": 0.001}
    same = train_result(rows, 1, {**base, "save_steps": 5, "save_total_limit": 2, "report_to": "none"})
    assert same.identity == train_result(rows, 1, base).identity == {"train": base}
    assert train_result(rows, 1, {**base, "learning_rate": 0.01}).identity != same.identity


def test_eval_speed_keys_are_identity_false_fields():
    from evalsuite.identity import scheduling_keys
    from evalsuite.outdir import EVAL_SPEED_KEYS
    from evalsuite.run_config import EvalConfig

    assert set(EVAL_SPEED_KEYS) <= scheduling_keys(EvalConfig)


def test_an_eval_output_resumes_under_another_batch_size_not_another_limit(tmp_path):
    from evalsuite.errors import UserError
    from evalsuite.outdir import OutputDir

    (tmp_path / "run.json").write_text('{"run_id": "r1", "ckpt_hash": "h", "config": {"batch_size": 8, "limit": 4}}')
    out = OutputDir(tmp_path)
    assert out.existing_run({"batch_size": 2, "limit": 4}, "h") == "r1"
    with pytest.raises(UserError, match=r"\(limit differ\)"):
        out.existing_run({"batch_size": 8, "limit": 5}, "h")
