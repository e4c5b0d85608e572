"""Output folders holding the user's own files (findings-reliability-2.md probes X1, X2): `report --out`
never replaces an index.html evalsuite did not write, `chair --output` never a foreign summary.json;
each is one line before any work, and a folder evalsuite wrote is written again."""
from __future__ import annotations

import json

from evalsuite.cli import main as cli_main
from tests.reliability.helpers import error_lines, snapshot


def test_X2_chair_output_keeps_a_users_summary_json(tmp_path, punkt_dir, capsys):
    """X2: a user's summary.json in --output: one line, exit 2, nothing changed; our own is rewritten."""
    caps = tmp_path / "caps.jsonl"
    caps.write_text('{"image_id": 1, "caption": "A dog on a couch."}\n')
    gt = tmp_path / "gt.json"
    gt.write_text(json.dumps({"1": ["couch", "dog"]}))
    out = tmp_path / "precious"
    out.mkdir()
    (out / "summary.json").write_text('{"mine": true}')
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    args = ["chair", "--captions", str(caps), "--gt", str(gt), "--output", str(out), "--nltk-data", str(punkt_dir),
            "--n-boot", "20"]
    assert cli_main(args) == 2
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "summary.json" in lines[0] and "did not write" in lines[0], lines
    assert snapshot(out) == before
    (out / "summary.json").unlink()
    assert cli_main(args) == 0 and cli_main(args) == 0     # evalsuite's own summary is replaced
    assert (out / "notes.txt").read_text() == "mine"


def test_X1_report_out_keeps_a_users_index_html(tmp_path, capsys):
    """X1: a user's index.html in --out: one line, exit 2, nothing changed."""
    from tests.reliability.test_store import two_runs

    store, _ = two_runs(tmp_path)
    rep = tmp_path / "precious_rep"
    rep.mkdir()
    (rep / "index.html").write_text("<html>my page</html>")
    before = snapshot(rep)
    assert cli_main(["report", "--store", str(store.path), "--out", str(rep)]) == 2
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "index.html there was not written by evalsuite" in lines[0], lines
    assert snapshot(rep) == before
