"""Damaged checkpoints on resume (issue 37 item 4): the newest checkpoint's optimizer.pt cut to 100 bytes or
its adapter_model.safetensors cut to 200 bytes is named in one warning and the resume continues from the
latest checkpoint whose files all load; when none loads, one line names the file and the choices."""
from __future__ import annotations

import json

import pytest

from tests.reliability.helpers import error_lines
from tests.reliability.test_train_outdir import args, pairs  # noqa: F401 - the fixture
from training.train import main as train_main


def _cut(path, n):
    data = path.read_bytes()
    path.write_bytes(data[:n])


@pytest.mark.parametrize("name,size", [("optimizer.pt", 100), ("adapter_model.safetensors", 200)])
def test_damaged_newest_checkpoint_is_skipped_then_refused(tiny_vlm_dir, world_dir, pairs, tmp_path, capsys,  # noqa: F811
                                                           caplog, name, size):
    out = tmp_path / "tr"
    first = args(tiny_vlm_dir, world_dir, pairs, out, "--save_strategy", "steps", "--save_steps", "1")
    assert train_main(first) == 0
    _cut(out / "checkpoint-2" / name, size)
    capsys.readouterr()

    assert train_main([*first, "--max_steps", "3", "--resume_from_checkpoint", "true"]) == 0
    err = capsys.readouterr().err + caplog.text
    assert "Traceback" not in err
    assert f"checkpoint-2/{name} (" in err and "skipped, continuing from the latest checkpoint" in err, err[-3000:]
    run = json.loads((out / "train_run.json").read_text())
    assert run["history"][-1]["resume_from_checkpoint"] == str(out / "checkpoint-1")
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert steps[-2:] == [2, 3]   # steps 2 and 3 trained again from checkpoint-1

    # every checkpoint damaged: one line naming a damaged file and the way out
    for ckpt in out.glob("checkpoint-*"):
        _cut(ckpt / name, size)
    rc = train_main([*first, "--max_steps", "4", "--resume_from_checkpoint", "true"])
    err = capsys.readouterr().err
    lines = error_lines(err)
    assert rc == 2 and "Traceback" not in err and len(lines) == 1, err[-3000:]
    assert f"/{name} (" in lines[0] and "no checkpoint-N in" in lines[0] and "another output_dir" in lines[0], lines


def test_damaged_file_reads_headers_only(tmp_path):
    from training.resume import damaged_file

    d = tmp_path / "c"
    d.mkdir()
    (d / "trainer_state.json").write_text("{}")
    assert damaged_file(d) is None
    (d / "model.safetensors").write_bytes((10**9).to_bytes(8, "little") + b"{}")
    assert damaged_file(d).startswith("model.safetensors (header length")
    (d / "model.safetensors").unlink()
    (d / "optimizer.pt").write_bytes(b"PK\x03\x04" + b"\0" * 96)
    assert damaged_file(d).startswith("optimizer.pt (not a readable archive")
