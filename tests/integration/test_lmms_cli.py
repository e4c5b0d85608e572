"""lmms-eval tasks through the two command lines: `evalsuite run` (a group task into the store, the table
and the report, plus lmms-eval's own results layout) and `lmms-eval --model evalsuite` with a
shipped yaml given its data through `data_files` (docs/lmms-eval.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow

POPE_FULL_LEAVES = ["pope_full/pope_adv", "pope_full/pope_pop", "pope_full/pope_random"]


def _pope_share(samples_jsonl: Path) -> float:
    """The share of logged POPE answers whose parsed prediction equals the truth (what pope_accuracy must be)."""
    recs = [json.loads(x)["pope_accuracy"] for x in samples_jsonl.read_text().splitlines() if x.strip()]
    assert recs, samples_jsonl
    return sum(str(r["prediction"]).strip().lower() == str(r["ground_truth"]).strip().lower() for r in recs) / len(recs)


def test_group_task_runs_through_evalsuite_run_into_store_table_and_report(tiny_vlm_dir, world_dir, tmp_path):
    """`pope_full` is a group of the three POPE samplings: each leaf lands as pope_full/<leaf> in OUT,
    summary.json, the store (run ids without '/'), the table and the report; OUT/lmms_results.json holds
    lmms-eval's layout keyed by lmms-eval's task names."""
    store, out = tmp_path / "store", tmp_path / "out"
    env = {"HF_HOME": str(tmp_path / "hf"), "LM_HARNESS_CACHE_PATH": str(tmp_path / "req")}
    res = run_cli("run", "--ckpt", str(tiny_vlm_dir), "--tasks", "pope_full", "--data-root", str(world_dir),
                  "--limit", "4", "--gen-kwargs", "max_new_tokens=3", "--store", str(store), "--output", str(out),
                  env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary) == POPE_FULL_LEAVES
    for task in POPE_FULL_LEAVES:
        assert len((out / task / "samples.jsonl").read_text().splitlines()) == 4
        assert summary[task]["config"]["n"] == 4 and summary[task]["config"]["limit"] == 4
        assert "questions/pope_val_" in summary[task]["config"]["data_source"]

    layout = json.loads((out / "lmms_results.json").read_text())
    leaves = ["evalsuite_pope_adversarial", "evalsuite_pope_popular", "evalsuite_pope_random"]
    assert sorted(layout["group_subtasks"]["evalsuite_pope_full"]) == leaves
    for leaf, task in zip(leaves, POPE_FULL_LEAVES):   # both sorted: adversarial, popular, random
        # the accuracy is the share of the leaf's 4 questions whose parsed answer equals the truth
        assert layout["results"][leaf]["pope_accuracy,none"] == pytest.approx(_pope_share(out / task / "samples.jsonl"))
        assert "pope_accuracy_stderr,none" in layout["results"][leaf]
        assert layout["n-samples"][leaf]["effective"] == 4
        assert layout["configs"][leaf]["task"] == leaf and leaf in layout["versions"]
    assert "samples" not in layout and layout["config"]["limit"] == 4

    from evalsuite.store import Store

    rows = Store(store).snapshot().metrics()
    assert sorted(set(rows["task"])) == POPE_FULL_LEAVES
    assert all("/" not in r for r in rows["run_id"]) and rows["run_id"].nunique() == 3
    table = run_cli("table", "--store", str(store), "--format", "json")
    assert table.returncode == 0, table.stderr[-2000:]
    assert all(f"{t}/pope_accuracy" in table.stdout for t in POPE_FULL_LEAVES)
    report = run_cli("report", "--store", str(store), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr[-2000:]
    assert "pope_full/pope_adv" in (tmp_path / "report" / "index.html").read_text()


def _entry_point_dir(root: Path) -> Path:
    """A dist-info holding pyproject's `lmms_eval.models` entry point, as `pip install` would write it
    (the checkout under test may not be the installed one)."""
    import tomllib

    repo = Path(__file__).resolve().parents[2]
    target = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["entry-points"]["lmms_eval.models"]
    info = root / "evalsuite_entry_point-0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evalsuite-entry-point\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[lmms_eval.models]\n" + "".join(f"{k} = {v}\n" for k, v in target.items()))
    return root


def _lmms_eval_cli(args: list[str], tmp_path: Path, env_extra: dict) -> subprocess.CompletedProcess:
    repo = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(_entry_point_dir(tmp_path / "ep")), str(repo), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, **env_extra, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "lmms_eval", *args], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)


def test_lmms_eval_cli_runs_a_shipped_yaml_with_data_files(tiny_vlm_dir, world_dir, tmp_path):
    """The documented route: a 4-line yaml includes evalsuite_pope_random.yaml and adds data_files;
    `--model_args pretrained=CK,batch_size=4` (model_args win over the CLI's own --batch_size);
    lmms-eval writes its results json. With --verbosity DEBUG a failure exits non-zero."""
    yaml_dir = Path(__file__).resolve().parents[2] / "evalsuite" / "lmms" / "yaml"
    tasks = tmp_path / "mytasks"
    tasks.mkdir()
    parquet = world_dir / "questions" / "pope_val_random.parquet"
    (tasks / "pope_random_local.yaml").write_text(textwrap.dedent(f"""\
        include: {yaml_dir / 'evalsuite_pope_random.yaml'}
        task: evalsuite_pope_random
        dataset_kwargs:
          data_files:
            test: {parquet}
        """))
    env = {"HF_HOME": str(tmp_path / "hf"), "LM_HARNESS_CACHE_PATH": str(tmp_path / "req")}
    common = ["--model", "evalsuite", "--tasks", "evalsuite_pope_random", "--include_path", str(tasks),
              "--limit", "4", "--gen_kwargs", "max_new_tokens=3", "--log_samples"]
    ok = _lmms_eval_cli([*common, "--model_args", f"pretrained={tiny_vlm_dir},batch_size=4,device=cpu",
                         "--output_path", str(tmp_path / "out")], tmp_path, env)
    assert ok.returncode == 0, (ok.stdout + ok.stderr)[-3000:]
    (results_file,) = (tmp_path / "out").rglob("*_results.json")
    results = json.loads(results_file.read_text())
    (samples_file,) = (tmp_path / "out").rglob("*_samples_evalsuite_pope_random.jsonl")
    assert results["results"]["evalsuite_pope_random"]["pope_accuracy,none"] == pytest.approx(_pope_share(samples_file))
    assert results["n-samples"]["evalsuite_pope_random"]["effective"] == 4
    assert "batch_size=4" in results["config"]["model_args"]

    (tasks / "pope_random_local.yaml").write_text(
        (tasks / "pope_random_local.yaml").read_text().replace(str(parquet), str(tmp_path / "missing.parquet")))
    bad = _lmms_eval_cli([*common, "--model_args", f"pretrained={tiny_vlm_dir},device=cpu", "--verbosity", "DEBUG",
                          "--output_path", str(tmp_path / "out2")], tmp_path, env)
    assert bad.returncode != 0
    assert "missing.parquet" in bad.stdout + bad.stderr
