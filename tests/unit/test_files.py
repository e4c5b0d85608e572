"""Atomic writes and the image-root guard."""
import os

import pytest

from evalsuite.errors import UserError
from evalsuite.files import safe_join, write_json_atomic, write_text_atomic


def test_atomic_write_leaves_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    write_text_atomic(target, "old")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_json_atomic(target, {"new": 1})
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temp file left behind


def test_safe_join_refuses_escape(tmp_path):
    (tmp_path / "a").mkdir()
    assert safe_join(tmp_path, "a/x.png") == (tmp_path / "a" / "x.png").resolve()
    for bad in ("../x.png", "/etc/passwd", "a/../../x.png"):
        with pytest.raises(UserError, match="escapes the image root"):
            safe_join(tmp_path, bad)
