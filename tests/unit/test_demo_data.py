"""The demo's SFT data honours its config, since a knob that changes nothing would mislead whoever tunes the
demo (the partner habit itself is tested in test_world_chairmap)."""
from training.demo.data import sft_records
from training.demo.judge import scene_table


def test_sft_records_qa_per_image_reaches_the_data(world_dir):
    n_train = len(scene_table(world_dir, "train"))
    for qa in (0, 1, 3):
        records = sft_records(world_dir, hallucination_rate=0.0, seed=0, qa_per_image=qa)
        answers = [r["conversations"][1]["value"] for r in records]
        assert len(records) == n_train * (1 + qa)
        assert sum(a in ("Yes", "No") for a in answers) == n_train * qa



def test_demo_config_nested_overrides(repo_root):
    import pytest

    from evalsuite.errors import UserError
    from training.demo import DemoConfig

    cfg = DemoConfig.from_yaml(repo_root / "configs" / "demo.yaml",
                               ["csr.train.learning_rate=1e-4", "--seed=3", "csr.tree.num_samples=2"])
    assert cfg.seed == 3 and cfg.csr["train"]["learning_rate"] == 1e-4 and cfg.csr["tree"]["num_samples"] == 2
    assert cfg.csr["train"]["beta"] == 0.1  # the rest of the section is kept
    with pytest.raises(UserError, match="unknown key"):
        DemoConfig.from_yaml(repo_root / "configs" / "demo.yaml", ["not_a_field=1"])
    with pytest.raises(UserError, match="hallucination: .partnr. is not one of .partner., .random."):
        DemoConfig.from_yaml(repo_root / "configs" / "demo.yaml", ["hallucination=partnr"])
    with pytest.raises(UserError, match="seed is not a section"):
        DemoConfig.from_yaml(repo_root / "configs" / "demo.yaml", ["seed.x=1"])
