"""`evalsuite run` (the CLI's main, in process): what makes two results the same evaluation, and what is
stored when.

- own tasks: the device type and the dtype are part of the identity (bfloat16 answers are not float32's);
- lmms-eval tasks: a task already stored for this checkpoint and identity is reused, not run again;
  `--seed` reaches lmms-eval's evaluator and its identity; the table and the report say where an lmms
  task's documents came from (its data files) and its limit;
- an lmms-eval group aggregate (no per-sample rows of its own, metrics over its members' samples) is
  stored; a result with neither samples nor a metric counting any is refused.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsuite.cli import main as cli_main
from evalsuite.types import MetricValue, TaskResult


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _metric_files(store: Path) -> list[Path]:
    return sorted((store / "metrics").glob("*.parquet"))


def test_dtype_and_device_type_are_part_of_own_task_identity(tiny_vlm_dir, world_dir, tmp_path):
    """The same caption run in float32 and in bfloat16 (one store): two eval_keys, so the second run is
    not served the first one's stored result; each identity names device "cpu" and its dtype."""
    store = tmp_path / "store"
    common = ["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "caption", "--data-root", str(world_dir),
              "--limit", "2", "--max-new-tokens", "3", "--device", "cpu", "--store", str(store)]
    for dtype in ("float32", "bfloat16"):
        assert cli_main([*common, "--dtype", dtype, "--output", str(tmp_path / dtype)]) == 0
    f32, bf16 = (_summary(tmp_path / d)["caption"] for d in ("float32", "bfloat16"))
    assert "reused" not in bf16 and bf16["metrics"]
    assert (f32["identity"]["device"], f32["identity"]["dtype"]) == ("cpu", "float32")
    assert (bf16["identity"]["device"], bf16["identity"]["dtype"]) == ("cpu", "bfloat16")
    assert f32["eval_key"] != bf16["eval_key"] and len(_metric_files(store)) == 2


@pytest.fixture
def pope_config(world_dir, tmp_path) -> Path:
    """An eval preset running lmms-eval POPE (random) on one local parquet file, 2 questions."""
    data = world_dir / "questions" / "pope_val_random.parquet"
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(f"tasks: [pope_random]\nlimit: 2\ndevice: cpu\nlmms:\n  gen_kwargs: max_new_tokens=3\n"
                   f"  data:\n    pope_random: [{data}]\n")
    return cfg


def test_lmms_task_reused_seeded_and_its_source_shown(tiny_vlm_dir, world_dir, pope_config, tmp_path,
                                                     monkeypatch, capsys):
    """Run 1 stores pope_random; run 2 (same config, other --output) reuses it: nothing run, nothing stored,
    "already in the store" printed; run 3 with --seed 7 is another identity: it runs (its greedy answers
    from run 1's cache), and lmms-eval's simple_evaluate got 7 for all four seeds; run 4 in bfloat16
    generates its answers anew. `evalsuite table` and the report name the data file and
    limit 2 for the lmms rows."""
    from evalsuite.lmms import backend as lb

    evaluator = lb.import_evaluator()
    seen: list[dict] = []
    original = evaluator.simple_evaluate

    def spy(*args, **kwargs):
        seen.append({k: kwargs.get(k) for k in ("random_seed", "numpy_random_seed", "torch_random_seed",
                                                "fewshot_random_seed")})
        return original(*args, **kwargs)

    monkeypatch.setattr(evaluator, "simple_evaluate", spy)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    store = tmp_path / "store"
    run = ["run", "--config", str(pope_config), "--ckpt", str(tiny_vlm_dir), "--store", str(store)]
    assert cli_main([*run, "--output", str(tmp_path / "o1")]) == 0
    first = _summary(tmp_path / "o1")["pope_random"]
    assert first["identity"]["seed"] == 0 and first["identity"]["device"] == "cpu"
    assert seen == [dict.fromkeys(seen[0], 0)]
    capsys.readouterr()

    assert cli_main([*run, "--output", str(tmp_path / "o2")]) == 0
    again = _summary(tmp_path / "o2")["pope_random"]
    assert again["reused"] and again["eval_key"] == first["eval_key"] and again["metrics"] == []
    assert "already in the store" in capsys.readouterr().out
    assert len(seen) == 1 and len(_metric_files(store)) == 1

    assert cli_main([*run, "--seed", "7", "--output", str(tmp_path / "o3")]) == 0
    third = _summary(tmp_path / "o3")["pope_random"]
    assert seen[1] == dict.fromkeys(seen[1], 7) and third["identity"]["seed"] == 7
    assert third["eval_key"] != first["eval_key"] and len(_metric_files(store)) == 2
    assert third["extra"]["responses"] == {"generated": 0, "cached": 2}   # greedy: run 1's answers
    assert cli_main([*run, "--dtype", "bfloat16", "--output", str(tmp_path / "o4")]) == 0
    bf16 = _summary(tmp_path / "o4")["pope_random"]     # bfloat16 answers are not float32's: generated
    assert bf16["identity"]["dtype"] == "bfloat16" and bf16["extra"]["responses"] == {"generated": 2, "cached": 0}
    capsys.readouterr()

    data = "questions/pope_val_random.parquet"   # a table names the data's files, not the machine's paths
    assert cli_main(["table", "--store", str(store), "--format", "json", "--no-samples"]) == 0
    rows = json.loads(capsys.readouterr().out)
    rows = rows if isinstance(rows, list) else rows["rows"]
    lmms_rows = [r for r in rows if r["task"] == "pope_random"]
    assert lmms_rows and all(r["data"] == data and r["limit"] == 2 for r in lmms_rows)
    assert cli_main(["report", "--store", str(store), "--out", str(tmp_path / "report")]) == 0
    assert f"data {data}, limit 2" in (tmp_path / "report" / "index.html").read_text()


def _fake_lmms(results):
    def fake(self, ctx, plan, inputs):   # LmmsTask.run: the step's results, as lmms-eval's run returns them
        return list(results)
    return fake


def test_group_aggregate_without_own_samples_is_stored(tiny_vlm_dir, world_dir, tmp_path, monkeypatch):
    """lmms-eval yields a leaf (2 samples) and its group's aggregate (samples [], metric n=2, as
    lmms_results.to_task_results builds it): both are written and stored. A result with no samples and
    no metric counting any is refused: exit 2, one line naming the task."""
    import evalsuite.lmms.task as lmms_mod

    leaf = TaskResult("pope_random", "0.0", [MetricValue("pope_accuracy", 0.5, True, n=2)],
                      samples=[{"key": "pope_random/0"}, {"key": "pope_random/1"}], identity={"lmms_task": "leaf"})
    group = TaskResult("pope_random/agg", "0.0", [MetricValue("pope_accuracy", 0.5, True, n=2)],
                       samples=[], identity={"lmms_task": "group", "members": [["pope_random", leaf.eval_key]]})
    run = ["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "pope_random", "--data-root", str(world_dir),
           "--limit", "2", "--device", "cpu", "--store", str(tmp_path / "store")]
    monkeypatch.setattr(lmms_mod.LmmsTask, "run", _fake_lmms([leaf, group]))
    assert cli_main([*run, "--output", str(tmp_path / "o1")]) == 0
    summary = _summary(tmp_path / "o1")
    assert summary["pope_random/agg"]["metrics"][0]["n"] == 2 and summary["pope_random/agg"]["num_samples"] == 0
    from evalsuite.store import Store

    assert sorted(set(Store(tmp_path / "store").snapshot().metrics()["task"])) == ["pope_random", "pope_random/agg"]

    empty = TaskResult("pope_random", "0.0", [MetricValue("pope_accuracy", 0.0, True, n=None)], samples=[])
    monkeypatch.setattr(lmms_mod.LmmsTask, "run", _fake_lmms([empty]))
    assert cli_main([*run, "--rerun", "--output", str(tmp_path / "o2")]) == 2
