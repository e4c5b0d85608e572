"""The CLI as a user runs it: instant --help, task listing, world + tiny-ckpt + run caption, errors."""
import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, cli_inprocess, run_cli


# what would make --help slow (seconds each): none is imported to build the parser. The time itself is a
# speed target, measured by bench/startup_speed.py (a wall-clock bound here failed on a loaded CI machine)
HEAVY = ("torch", "transformers", "datasets", "pandas", "pyarrow", "lmms_eval", "accelerate", "peft", "PIL",
         "nltk", "scipy", "sklearn", "deepspeed", "vllm")


def test_help_imports_nothing_heavy():
    code = ("import sys; from evalsuite.cli import build_parser; build_parser(); "
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    loaded = set(out.stdout.split())
    assert "evalsuite" in loaded and not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    res = run_cli("--help")
    assert res.returncode == 0 and "run" in res.stdout


def test_tasks_lists_registered():
    res = run_cli("tasks")
    assert res.returncode == 0
    names = [line.split()[0] for line in res.stdout.splitlines() if line and not line.startswith("(")]
    assert {"caption", "chair", "relevance", "mme", "pope", "mmhal", "objhal"} <= set(names)
    (objhal,) = [line for line in res.stdout.splitlines() if line.startswith("objhal ")]
    assert "needs: --data-root, objhal.data, judge" in objhal
    # the folder it names for `lmms-eval --include_path` holds the shipped yamls
    (folder,) = [line.split(": ", 1)[1] for line in res.stdout.splitlines() if line.startswith("yamls for")]
    assert (Path(folder) / "evalsuite_pope_full.yaml").is_file() and (Path(folder) / "evalsuite_mme.yaml").is_file()


def test_world_tinyckpt_run_caption(tmp_path):
    world, ckpt, out = tmp_path / "world", tmp_path / "tiny", tmp_path / "out"
    assert run_cli("world", "build", "--out", str(world), "--images", "24", "--seed", "3").returncode == 0
    # in this process (its own process: tests/integration/test_families.py, tests/unit/test_output_folders.py)
    assert cli_inprocess("tiny-ckpt", "--out", str(ckpt), "--seed", "0").returncode == 0
    res = run_cli("run", "--ckpt", str(ckpt), "--tasks", "caption", "--data-root", str(world),
                  "--output", str(out), "--store", str(tmp_path / "store"), "--limit", "5",
                  "--max-new-tokens", "8", "--batch-size", "4")
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["caption"]["task"] == "caption" and summary["caption"]["version"] == "1"
    rows = [json.loads(line) for line in (out / "caption" / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 5 and all({"key", "image_id", "image", "prompt", "answer"} <= r.keys() for r in rows)
    run = json.loads((out / "run.json").read_text())
    assert run["ckpt_hash"] and run["config"]["tasks"] == ["caption"] and run["iteration"] == 0


def test_run_errors(tmp_path, tiny_vlm_dir):
    res = run_cli("run", "--ckpt", str(tmp_path / "missing"), "--tasks", "caption", "--world")
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "does not exist" in res.stderr
    res = run_cli("run", "--ckpt", str(tiny_vlm_dir), "--tasks", "caption,no_such_task_xyz",
                  "--data-root", str(tmp_path))
    assert res.returncode == 2 and "no_such_task_xyz" in res.stderr and "caption" in res.stderr
