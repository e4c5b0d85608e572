"""What a new user meets first on the command line: one-line errors, quick refusals, no stray folders."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from evalsuite.errors import UserError
from tests.conftest import REPO, run_cli
from tests.report_data import demo_store


def test_bad_flag_after_pandas_is_one_stderr_line(tmp_path):
    # numexpr (imported by pandas) logs its thread count at INFO when neither OMP_NUM_THREADS nor
    # NUMEXPR_MAX_THREADS is set; the error must still be the only line
    demo_store(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "NUMEXPR_MAX_THREADS",
                                                            "NUMEXPR_NUM_THREADS")}
    res = run_cli("table", "--store", str(tmp_path / "store"), "--version", "999", env=env, clear_env=True)
    assert res.returncode == 2
    assert res.stderr.splitlines() == [res.stderr.strip()], res.stderr
    assert res.stderr.startswith("evalsuite: error: --version 999")


def test_misspelled_task_refused_before_lmms_eval_is_imported(tiny_vlm_dir, tmp_path):
    # in-process, so the modules loaded when the error came can be listed (the time: bench/startup_speed.py)
    code = ("import sys; from evalsuite.cli import main; "
            f"rc = main(['run', '--ckpt', {str(tiny_vlm_dir)!r}, '--tasks', 'chair,chiar', "
            f"'--data-root', {str(tmp_path)!r}, '--store', {str(tmp_path / 'store')!r}]); "
            "print(rc, 'lmms_eval' in sys.modules, 'torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}, timeout=600)
    assert res.stdout.split() == ["2", "False", "False"], res.stdout + res.stderr[-2000:]
    from evalsuite.tasks.registry import LMMS_LOCAL_TASKS, TASKS

    ours = ", ".join(sorted([*TASKS, *LMMS_LOCAL_TASKS]))
    assert res.stderr.strip().splitlines() == [
        f"evalsuite: error: --tasks chiar: unknown task (not an evalsuite task ({ours}) nor an lmms-eval task, "
        "group or tag; did you mean 'chair'?)"]


def test_lmms_eval_task_names_still_pass_the_quick_check(tmp_path):
    from evalsuite.lmms.names import refuse_unknown

    # real lmms-eval names of each kind (task, group, tag, a task whose yaml quotes its keys) are not refused
    refuse_unknown(["mme", "scienceqa_img", "pope_full", "mmlu_anatomy", "mmlu"], own=["chair"])
    with pytest.raises(UserError, match="chiar"):
        refuse_unknown(["chiar"], own=["chair"])


def test_names_in_yaml_reads_every_form():
    from evalsuite.lmms.names import names_in_yaml

    text = ('"task": "quoted_task"\ngroup: g1\ntag:\n  - t1\n  - t2  # comment\ntask:\n- sub_a\n- task: inline_b\n'
            '  include: x\ntag: [f1, "f2"]\ndataset_name: not_a_name\n')
    assert names_in_yaml(text) == {"quoted_task", "g1", "t1", "t2", "sub_a", "inline_b", "f1", "f2"}


@pytest.mark.slow
def test_scanned_names_cover_lmms_evals_own_index(tmp_path):
    """The quick check must never refuse a name lmms-eval knows: its scan is a superset of the real index."""
    from evalsuite.lmms import backend as lb
    from evalsuite.lmms.names import known_names

    index = set(lb.task_manager(include_defaults=True).task_index)
    assert len(index) > 100 and not index - known_names(cache_dir=tmp_path), sorted(index - known_names(cache_dir=tmp_path))[:20]


def test_flag_typo_suggests_the_flag():
    from evalsuite.run_config import load_eval_config

    with pytest.raises(UserError, match=r"unknown key 'chair_image' \(did you mean --chair-images\?\)"):
        load_eval_config(["--ckpt", "x", "--tasks", "chair", "--chair-image", "10"])
    with pytest.raises(UserError, match=r"unknown key 'max_new_token' \(did you mean --max-new-tokens\?\)"):
        load_eval_config(["--ckpt", "x", "--tasks", "chair", "max_new_token=8"])
    # a typo of a top-level field still names the field
    with pytest.raises(UserError, match=r"unknown key 'chekpt' \(did you mean 'ckpt'\?\)"):
        load_eval_config(["--chekpt", "x", "--tasks", "chair"])


def test_rerun_served_from_the_store_writes_no_run_folder(tiny_vlm_dir, world_dir, tmp_path, capsys):
    from evalsuite.cli import main as cli_main

    store = tmp_path / "store"
    run = ["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "caption", "--data-root", str(world_dir), "--limit", "2",
           "--max-new-tokens", "4", "--device", "cpu", "--store", str(store)]
    assert cli_main(run) == 0
    (first,) = (store / "runs").iterdir()
    assert (first / "caption" / "samples.jsonl").is_file()
    capsys.readouterr()
    assert cli_main(run) == 0
    assert list((store / "runs").iterdir()) == [first]           # nothing new: every task came from the store
    out = capsys.readouterr().out
    assert f"already in the store: {first.name}-caption" in out and '"output_dir": null' in out
    # an explicit --output is the user's request: that folder is written (its summary names the stored run)
    assert cli_main([*run, "--output", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "summary.json").is_file()
