"""docs/ARCHITECTURE.md's flow section names the function at each step of the eval, training and CSR
flows; every backticked dotted name there must import (module, then attributes), so the map cannot
drift from the code."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md"
NAME = re.compile(r"`((?:evalsuite|training)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`")


def _flow_names() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## The three flows", 1)[1].split("\n## ", 1)[0]
    return sorted(set(NAME.findall(section)))


def _resolve(name: str):
    """The object a dotted name names: the longest importable module prefix, then getattr for the rest."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


def test_the_map_names_each_flow_and_enough_steps():
    text = DOC.read_text(encoding="utf-8").split("## The three flows", 1)[1].split("\n## ", 1)[0]
    for flow in ("**Eval**", "**Training**", "**CSR**"):
        assert flow in text
    names = _flow_names()
    assert len(names) >= 30
    assert {"evalsuite.run.run_eval", "training.train.main", "training.csr.loop.run_csr"} <= set(names)


def test_every_function_the_map_names_exists():
    missing = []
    for name in _flow_names():
        try:
            obj = _resolve(name)
        except (ImportError, AttributeError) as e:
            missing.append(f"{name}: {e}")
            continue
        assert callable(obj) or isinstance(obj, type), name
    assert not missing, "\n".join(missing)
