"""A rerun never mixes two configurations (issue 37 item 1): a CSR rerun whose settings differ from a stage
that ran is one line naming the stage and the fields (exit 2, before any model loads), `--restart-from`
discards what the change invalidates and recomputes it, and scheduling settings are no change."""
from __future__ import annotations

import json

import pytest

from tests.conftest import REPO
from tests.reliability.helpers import error_lines
from training.train import main as train_main

CSR = str(REPO / "configs" / "csr_tiny.yaml")


@pytest.fixture()
def csr_argv(tmp_path, tiny_vlm_dir, tiny_clip_dir, world_dir):
    images = world_dir / "images" / "train"
    files = sorted(p.name for p in images.iterdir())[:4]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f, "image": f, "question": "Describe the image."}) + "\n"
                               for f in files))
    return ["--config", CSR, f"model={tiny_vlm_dir}", f"clip={tiny_clip_dir}", f"prompts={prompts}",
            f"image_root={images}", f"output_dir={tmp_path / 'run'}", f"store={tmp_path / 'store'}", "iterations=1",
            "tree.num_beams=3", "tree.num_beam_groups=3", "tree.max_new_tokens=6", "tree.max_depth=3",
            "train.max_steps=2", "train.per_device_train_batch_size=2"]


class Killed(Exception):
    pass


def _stop_before(monkeypatch, stage: str) -> None:
    """The loop dies as a kill would at the start of `stage` (its earlier stages' markers written)."""
    import training.csr.loop as loop

    def killed(*a, **k):
        raise Killed(stage)

    monkeypatch.setattr(loop, f"stage_{stage}", killed)


def _printed(capsys) -> str:
    """The last stdout line: train.py's result (the trainer's log rows come before it)."""
    return capsys.readouterr().out.strip().splitlines()[-1]


def _refused(capsys, rc) -> str:
    err = capsys.readouterr().err
    lines = error_lines(err)
    assert rc == 2 and "Traceback" not in err and len(lines) == 1 and lines[0].startswith("train.py: error: "), err
    return lines[0]


def test_rerun_after_generation_with_another_depth_is_refused_then_restarted(csr_argv, tmp_path, monkeypatch, capsys):
    """(a) killed after tree generation, rerun with tree.max_depth=1 (was 3): today the depth-3 trees were
    reused and max_depth 1 recorded. Now: refused in one line; --restart-from regrows them at depth 1."""
    import training.csr.loop as loop

    d = tmp_path / "run" / "iter_1"
    _stop_before(monkeypatch, "score")
    with pytest.raises(Killed):
        train_main(csr_argv)
    trees = (d / "trees.jsonl").read_bytes()
    assert (d / "generate.done").is_file() and not (d / "score.done").exists()
    loads = []
    monkeypatch.setattr(loop._Models, "vlm", lambda self, path: loads.append(path))   # no model may load
    line = _refused(capsys, train_main([*csr_argv, "tree.max_depth=1"]))
    assert "iter_1/generate ran with other settings (tree.max_depth: 3 -> 1)" in line, line
    assert "--restart-from iter_1/generate" in line and "another output_dir" in line
    assert not loads and (d / "trees.jsonl").read_bytes() == trees
    stages = json.loads((tmp_path / "run" / "stages.json").read_text())
    assert stages["iter_1"]["generate"]["tree"]["max_depth"] == 3

    # scheduling settings give the same trees: the same run, continued (to the next stage, killed again)
    monkeypatch.undo()
    _stop_before(monkeypatch, "score")
    with pytest.raises(Killed):
        train_main([*csr_argv, "tree.batch_nodes=3", "tree.prompt_batch=2", "tree.kv_budget=4096",
                    "reward.clip_batch=5"])
    assert (d / "trees.jsonl").read_bytes() == trees

    # a restart from a later stage does not cover the change
    line = _refused(capsys, train_main([*csr_argv, "tree.max_depth=1", "--restart-from", "iter_1/score"]))
    assert "iter_1/generate ran with other settings" in line and "restart from it or earlier" in line

    with pytest.raises(Killed):
        train_main([*csr_argv, "tree.max_depth=1", "--restart-from", "iter_1/generate"])
    from training.csr.generate import read_trees

    regrown = read_trees(d / "trees.jsonl")
    assert max(n.depth for t in regrown for n in t.nodes) == 1
    stages = json.loads((tmp_path / "run" / "stages.json").read_text())
    assert stages["iter_1"]["generate"]["tree"]["max_depth"] == 1
    assert json.loads((tmp_path / "run" / "config.json").read_text())["tree"]["max_depth"] == 1


@pytest.mark.slow
def test_finished_run_rerun_with_another_lambda_is_refused_then_recomputed(csr_argv, tmp_path, capsys):
    """(b) a finished run rerun with reward.lam=0.1: today the old merged path was printed, nothing said.
    Now: refused naming iter_1/pairs; --restart-from iter_1/pairs rebuilds the pairs and retrains, keeping
    the trees and scores, and stores the new pair statistics under a new run id."""
    from evalsuite.store import Store

    run = tmp_path / "run"
    d = run / "iter_1"
    assert train_main(csr_argv) == 0
    merged = _printed(capsys)
    assert merged == str(d / "merged")
    kept = {n: (d / n).read_bytes() for n in ("trees.jsonl", "scores.jsonl")}
    first_weights = (d / "merged" / "model.safetensors").read_bytes()

    line = _refused(capsys, train_main([*csr_argv, "reward.lam=0.1"]))
    assert "iter_1/pairs ran with other settings (reward.lam: 0.9 -> 0.1)" in line, line
    # batch bounds are no change: the finished run is returned as it is
    assert train_main([*csr_argv, "tree.batch_nodes=2", "reward.lm_batch=3", "train.save_total_limit=3"]) == 0
    assert _printed(capsys) == merged

    assert train_main([*csr_argv, "reward.lam=0.1", "--restart-from", "iter_1/pairs"]) == 0
    assert _printed(capsys) == merged
    assert {n: (d / n).read_bytes() for n in kept} == kept               # generate and score kept
    assert json.loads((d / "pair_stats.json").read_text())["identity"]["reward"]["lam"] == 0.1
    assert json.loads((d / "manifest.json").read_text())["config"]["reward"]["lam"] == 0.1
    assert (d / "merged" / "model.safetensors").read_bytes() != first_weights
    rows = Store(tmp_path / "store").snapshot().metrics()
    pairs = rows[rows["task"] == "csr_pairs"]
    assert pairs["run_id"].nunique() == 2 and any(r.endswith("-pairs-r1") for r in set(pairs["run_id"]))
    # the restarted run is now the recorded one: rerunning it as it is continues nothing and returns M_1
    assert train_main([*csr_argv, "reward.lam=0.1"]) == 0


def test_restart_from_names_a_stage(csr_argv, capsys):
    line = _refused(capsys, train_main([*csr_argv, "--restart-from", "iter_1/merge"]))
    assert "--restart-from 'iter_1/merge': expected base_eval or iter_T/STAGE" in line


def test_restart_from_is_csr_only(tmp_path, capsys):
    line = _refused(capsys, train_main(["--method", "dpo", "--model_name_or_path", str(tmp_path), "--data_path",
                                        str(tmp_path / "p.json"), "--output_dir", str(tmp_path / "o"),
                                        "--restart-from", "iter_1/train"]))
    assert "--restart-from: only the CSR loop" in line


def test_no_pairs_is_one_line_not_a_traceback(csr_argv, monkeypatch, capsys):
    """Item 7: an iteration without preference pairs (RunFailure) ends in one line, exit 1."""
    import training.csr.pairs as pairs

    monkeypatch.setattr(pairs, "build_pairs", lambda *a, **k: ([], {"no_paths": 4}))
    rc = train_main(csr_argv)
    err = capsys.readouterr().err
    lines = error_lines(err)
    assert rc == 1 and "Traceback" not in err, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("train.py: error: iteration 1: no preference pairs"), lines


def test_csr_sigterm_outside_dpo_says_rerun_the_same_command(csr_argv, tmp_path, monkeypatch, capsys):
    """Item 6: CSR stopped by SIGTERM outside its DPO stage: the line gives the command that continues it
    (the same command; the CSR command rejects --resume_from_checkpoint), and that command does continue."""
    import training.csr.loop as loop
    from evalsuite.interrupts import Terminated

    def terminated(*a, **k):
        raise Terminated()

    monkeypatch.setattr(loop, "stage_score", terminated)
    with pytest.raises(SystemExit) as e:
        train_main(csr_argv)
    assert e.value.code == 143
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and lines[0].startswith(
        f"train.py: terminated (finished stages stay in {tmp_path / 'run'}; continue with the same command: "
        "python training/train.py --config "), lines
    assert "--resume_from_checkpoint" not in lines[0] and f"prompts={tmp_path / 'prompts.jsonl'}" in lines[0]
    monkeypatch.undo()
    _stop_before(monkeypatch, "pairs")
    with pytest.raises(Killed):   # the advised command continues: generation is not redone, scoring runs
        train_main(csr_argv)
    assert (tmp_path / "run" / "iter_1" / "score.done").is_file()
