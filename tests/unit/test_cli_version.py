"""`evalsuite --version` says the version results and reports record (evalsuite/version.py)."""
from __future__ import annotations

import pytest

from evalsuite.cli import build_parser
from evalsuite.version import code_version


def test_version_is_the_recorded_code_version(capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"evalsuite {code_version()}\n"
