"""A resumed training keeps the first half's settings (issue 37 item 1 (c)): a resume under other settings
of the weights is one line naming them (exit 2, train_run.json untouched); a resume with the recorded
settings (training longer allowed) adds an entry to train_run.json's history, never rewrites the first."""
from __future__ import annotations

import json

from tests.reliability.helpers import error_lines
from tests.reliability.test_train_outdir import args, pairs  # noqa: F401 - the fixture
from training.train import main as train_main


def test_resume_under_other_settings_is_refused_and_history_is_kept(tiny_vlm_dir, world_dir, pairs, tmp_path,  # noqa: F811
                                                                     capsys):
    out = tmp_path / "tr"
    first = args(tiny_vlm_dir, world_dir, pairs, out, "--learning_rate", "0.01", "--beta", "0.1",
                 "--save_strategy", "steps", "--save_steps", "1")
    assert train_main(first) == 0
    record = (out / "train_run.json").read_bytes()
    capsys.readouterr()

    rc = train_main([*first, "--resume_from_checkpoint", "true", "--learning_rate", "0.5", "--beta", "0.9"])
    err = capsys.readouterr().err
    lines = error_lines(err)
    assert rc == 2 and "Traceback" not in err and len(lines) == 1, err[-2000:]
    assert lines[0].startswith(f"train.py: error: output_dir {out}: resuming a run of other settings ("), lines
    assert "beta: 0.1 -> 0.9" in lines[0] and "learning_rate: 0.01 -> 0.5" in lines[0]
    assert (out / "train_run.json").read_bytes() == record

    # the recorded settings, trained longer (and a scheduling setting changed): resumed, both starts on record
    assert train_main([*first, "--resume_from_checkpoint", "true", "--max_steps", "3", "--save_total_limit", "2"]) == 0
    run = json.loads((out / "train_run.json").read_text())
    assert run["config"]["max_steps"] == 2 and run["config"]["learning_rate"] == 0.01
    assert [h["config"]["max_steps"] for h in run["history"]] == [2, 3]
    assert run["history"][0]["resume_from_checkpoint"] is None
    assert run["history"][1]["resume_from_checkpoint"] == str(out / "checkpoint-2")
    assert all(h["config"]["beta"] == 0.1 for h in run["history"])
