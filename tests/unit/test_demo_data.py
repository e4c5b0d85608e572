"""Issue 9: the demo's SFT data honours its config (the partner habit itself: test_world_chairmap)."""
from training.demo.data import sft_records
from training.demo.judge import scene_table


def test_sft_records_qa_per_image_reaches_the_data(world_dir):
    n_train = len(scene_table(world_dir, "train"))
    for qa in (0, 1, 3):
        records = sft_records(world_dir, hallucination_rate=0.0, seed=0, qa_per_image=qa)
        answers = [r["conversations"][1]["value"] for r in records]
        assert len(records) == n_train * (1 + qa)
        assert sum(a in ("Yes", "No") for a in answers) == n_train * qa

