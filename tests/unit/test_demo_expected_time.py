"""The demo's expected run time has one source, configs/demo.yaml's expected_minutes: `make demo` prints it
before the install, train.py at the start (training/demo/__init__.py), and the README states the same."""
import re
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import REPO


def _minutes() -> float:
    return float(yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())["expected_minutes"])


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_make_demo_announces_the_presets_time():
    # --no-print-directory: run from another make (`make test`), make announces the directory it enters first
    first = subprocess.run(["make", "--no-print-directory", "-n", "demo"], cwd=REPO, capture_output=True,
                           text=True).stdout.splitlines()[0]
    assert f"about {_minutes():g} minutes on a 2-core CPU" in first, first


def test_readme_states_the_presets_time():
    readme = (REPO / "README.md").read_text()
    stated = re.findall(r"expected\s+run\s+time[^.]*?about\s+(\d+(?:\.\d+)?)\s+minutes", readme)
    assert stated and {float(s) for s in stated} == {_minutes()}, stated


def test_demo_logs_the_presets_time(tmp_path, caplog, monkeypatch):
    import logging

    import training.demo as demo

    class Stop(Exception):
        pass

    def stop(*a, **k):
        raise Stop

    monkeypatch.setattr("evalsuite.world.build.build_world", stop)
    cfg = demo.DemoConfig.from_yaml(REPO / "configs" / "demo.yaml", [f"output_dir={tmp_path / 'o'}"])
    with caplog.at_level(logging.INFO, logger="training.demo"), pytest.raises(Stop):
        demo.run_demo(cfg)
    assert f"expected run time about {_minutes():g} minutes" in caplog.text
