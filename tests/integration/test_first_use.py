"""What a new user meets first on the command line: one-line errors, quick refusals, no stray folders."""
from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import run_cli
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
