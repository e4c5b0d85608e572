"""The one config mechanism (evalsuite/config.py) and train.py's front door over it: every shipped preset
dry-runs; bad keys, types and values are one line naming the key and where it came from, exit 2."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from evalsuite.config import build, load, missing_paths, split_args, to_yaml
from evalsuite.errors import UserError

REPO = Path(__file__).resolve().parents[2]
PRESETS = sorted(p for p in (REPO / "configs").rglob("*.yaml") if p.parent.name != "accelerate")


@dataclass
class Inner:
    k: int = 1
    names: list[str] = field(default_factory=list)

    def __post_init__(self):
        if self.k < 0:
            raise UserError(f"k: must be >= 0, got {self.k}")


@dataclass
class Outer:
    lr: float = 0.1
    mode: Literal["a", "b"] = "a"
    tag: str | None = None
    save: str = "steps"
    data: str = field(default="", metadata={"path": "file"})
    inner: Inner = field(default_factory=Inner)


def test_override_syntaxes():
    own, items = split_args(["--config", "c.yaml", "--lr", "1e-4", "--mode=b", "inner.k=3", "--dry-run", "--flag"],
                            ("config", "dry_run!"))
    assert own == {"config": "c.yaml", "dry_run": True}
    assert [(k, str(v)) for k, v in items] == [("lr", "1e-4"), ("mode", "b"), ("inner.k", "3"), ("flag", "true")]


def test_types_are_read_and_checked(tmp_path):
    y = tmp_path / "p.yaml"
    y.write_text("lr: 5e-3\ninner:\n  names: [x, y]\n")
    cfg = load(Outer, y, ["inner.k=2", "--save", "no", "tag=null"])
    # 5e-3 in a YAML file is a float (PyYAML alone reads it as a string); `no` stays text for a str field
    assert (cfg.lr, cfg.inner.k, cfg.inner.names, cfg.save, cfg.tag) == (5e-3, 2, ["x", "y"], "no", None)
    assert load(Outer, None, ["inner.names=a,b"]).inner.names == ["a", "b"]


@pytest.mark.parametrize("data, overrides, message", [
    ({"lr": "fast"}, [], "p.yaml: lr: expected a number, got the string 'fast'"),
    ({}, ["inner.k=x"], "command line: inner.k: expected an int, got the string 'x'"),
    ({"inner": {"k": 1.5}}, [], "p.yaml: inner.k: expected an int, got float 1.5"),
    ({"mode": "c"}, [], "p.yaml: mode: 'c' is not one of 'a', 'b'"),
    ({"modee": "a"}, [], "p.yaml: unknown key 'modee' (did you mean 'mode'?)"),
    ({"inner": {"kk": 1}}, [], "p.yaml: unknown key 'inner.kk' (did you mean 'inner.k'?)"),
    ({"inner": 3}, [], "p.yaml: inner: expected a mapping (section), got int 3"),
    ({}, ["inner.k=-1"], "command line: inner.k: must be >= 0, got -1"),
    ({}, ["lr.x=1"], "command line: lr is not a section (it takes a number)"),
])
def test_errors_name_the_key_and_the_source(tmp_path, data, overrides, message):
    import yaml

    y = tmp_path / "p.yaml"
    y.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError) as e:
        load(Outer, y, overrides)
    assert str(e.value).replace(str(tmp_path) + "/", "") == message


def test_text_for_a_string_field_is_taken_as_typed():
    """A prompt, path or label on the command line is never read as YAML: no comment stripping, no
    quote removal, no empty-or-tilde-as-null; `null` alone unsets an optional field."""
    cfg = load(Outer, None, ["--save", "Describe it. # be brief", "tag='quoted'", "--data", "out #2"])
    assert (cfg.save, cfg.tag, cfg.data) == ("Describe it. # be brief", "'quoted'", "out #2")
    cfg = load(Outer, None, ["--tag", "~", "inner.names=[a, b]"])
    assert (cfg.tag, cfg.inner.names) == ("~", ["a", "b"])
    assert load(Outer, None, ["tag=null", "--save", ""]).tag is None


def test_yaml_dump_round_trips_and_paths_are_listed(tmp_path):
    cfg = build(Outer, {"lr": 1e-7, "data": str(tmp_path / "none.json")})
    assert build(Outer, __import__("yaml").safe_load(to_yaml(cfg))) == cfg
    assert missing_paths(cfg) == [f"data: {tmp_path / 'none.json'} (no such file)"]


def _train(*args):
    """train.py's main in this process (tests/conftest.py: train_inprocess): these are one-line errors and
    dry runs, and a subprocess each would pay ~10 s of imports."""
    from tests.conftest import train_inprocess

    return train_inprocess(*args)


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_every_preset_dry_runs(preset):
    """Each preset's first comment is its command and --dry-run exits 0 printing the resolved YAML: training
    presets name their method and go through train.py, eval presets (configs/eval/) through `evalsuite run`."""
    import yaml

    text = preset.read_text()
    data = yaml.safe_load(text)
    if preset.parent.name == "eval":
        assert text.startswith("# evalsuite run --config configs/eval/"), preset
        r = subprocess.run([sys.executable, "-m", "evalsuite.cli", "run", "--config", str(preset), "--dry-run"],
                           capture_output=True, text=True, timeout=300, cwd=REPO)
        assert r.returncode == 0, r.stderr[-2000:]
        assert yaml.safe_load(r.stdout)["tasks"] == data["tasks"]
    else:
        assert text.startswith("# ") and "training/train.py" in text.splitlines()[0], preset
        assert data.get("method") in ("sft", "dpo", "csr", "demo"), preset
        r = _train("--config", str(preset), "--dry-run")
        assert r.returncode == 0, r.stderr[-2000:]
        assert yaml.safe_load(r.stdout)["method"] == data["method"]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args, message", [
    (["--config", "configs/csr_tiny.yaml", "iterations=three"],
     "train.py: error: command line: iterations: expected an int, got the string 'three'"),
    (["--config", "configs/csr_tiny.yaml", "tree.beams=5"],
     "train.py: error: command line: unknown key 'tree.beams' (did you mean 'tree.num_beams'?)"),
    (["--config", "configs/csr_tiny.yaml", "train.betaa=0.2"],
     "train.py: error: command line: csr.train: unknown key 'betaa' (did you mean 'beta'?)"),
    (["--config", "configs/demo_tiny.yaml", "csr.reward.lam=2"],
     "train.py: error: command line: demo.csr: reward.lam: must be in [0, 1], got 2.0"),
    (["--config", "configs/train/tiny_cpu.yaml", "--loss_type", "dpo"],
     "train.py: error: command line: loss_type: 'dpo' is not one of 'sigmoid', 'hinge', 'ipo', 'kto_pair', 'ddpo'"),
    (["--model_name_or_path", "x"],
     "train.py: error: no method: pass --method sft|dpo|csr|demo or a --config preset that names its `method:`"),
])
def test_bad_config_is_one_line_exit_2_before_any_model(args, message):
    r = _train(*args, "--dry-run")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not any(w in ln for w in ("WARNING", "Warning", "warn"))]
    assert (r.returncode, lines) == (2, [message])


def test_string_where_an_int_belongs_in_a_preset(tmp_path):
    """The issue's case: `iterations: "3"` in a CSR YAML is exit 2 and one line, not a TypeError traceback."""
    p = tmp_path / "csr.yaml"
    p.write_text((REPO / "configs" / "csr_tiny.yaml").read_text().replace("iterations: 2", 'iterations: "3"'))
    r = _train("--config", str(p))
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == \
        f"train.py: error: {p}: iterations: expected an int, got the string '3'"
