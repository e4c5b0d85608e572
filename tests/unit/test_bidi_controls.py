"""Bidirectional and zero-width control characters in user and model text (answers, labels, checkpoint
names, configs) never reach a reader raw: the report writes them out visibly and isolates the text
(evalsuite/bidi.py through the page's one `finalize` hook), stderr lines and `evalsuite table` write them
out visibly."""
from __future__ import annotations

import json

from evalsuite.bidi import CONTROLS, FSI, PDI, isolated, visible
from evalsuite.report import build_report
from evalsuite.store import Store
from evalsuite.types import MetricValue, TaskResult
from tests.conftest import run_cli
from tests.report_data import demo_store

PAYLOAD = "abc\u202egpj.exe"
SHOWN = "abc\u27e8U+202E\u27e9gpj.exe"


def test_every_control_is_written_out_and_text_is_isolated():
    assert visible(PAYLOAD) == SHOWN
    assert visible("".join(CONTROLS)) == "".join(f"\u27e8U+{ord(c):04X}\u27e9" for c in CONTROLS)
    assert len(CONTROLS) == len(set(CONTROLS)) == 16
    assert isolated(PAYLOAD) == f"{FSI}{SHOWN}{PDI}"
    assert isolated("\u05e9\u05dc\u05d5\u05dd 3") == f"{FSI}\u05e9\u05dc\u05d5\u05dd 3{PDI}"   # Hebrew
    assert isolated("0.512") == "0.512" and isolated("a dog .") == "a dog ."   # sort keys stay plain


def _unbalanced(html: str) -> bool:
    depth = 0
    for ch in html:
        depth += (ch == FSI) - (ch == PDI)
        if depth < 0:
            return True
    return depth != 0


def test_report_neutralises_controls_in_answers_labels_names_and_configs(tmp_path):
    store = demo_store(tmp_path, n_images=6, payload=PAYLOAD)   # an answer and a run's config hold it
    store.write_run({"ckpt": f"/ckpts/{PAYLOAD}", "ckpt_hash": "f" * 64, "iteration": 0,
                     "label": f"lab{PAYLOAD}\u200b\ufeff"},
                    [TaskResult("pope", "0.0", [MetricValue("f1", 0.7, True, 300, 0.68, 0.72, variant="random")])])
    html = build_report(store, tmp_path / "r").read_text(encoding="utf-8")
    assert not any(c in html for c in CONTROLS if c not in (FSI, PDI))
    assert not _unbalanced(html)   # the only isolates are the page's own, each closed
    assert f"{FSI}. {SHOWN}{PDI}</p>" in html                        # the answer (its text after a marked word)
    assert f"{FSI}/ckpts/{SHOWN}{PDI}" in html                       # the checkpoint path
    assert f"{FSI}lab{SHOWN}\u27e8U+200B\u27e9\u27e8U+FEFF\u27e9{PDI}" in html   # the label
    assert "\\u202e" in html.split("<pre>", 1)[1]                    # the run's config: JSON escapes it


def test_cli_error_line_writes_controls_out(tmp_path):
    res = run_cli("run", "--ckpt", str(tmp_path / PAYLOAD), "--tasks", "caption", "--world")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "\u202e" not in res.stderr and SHOWN in res.stderr


def test_table_writes_controls_out(tmp_path):
    store = Store(tmp_path / "store")
    store.write_run({"ckpt": f"/c/{PAYLOAD}", "ckpt_hash": "e" * 64, "iteration": 0, "label": PAYLOAD},
                    [TaskResult("pope", "0.0", [MetricValue("f1", 0.7, True, 300, 0.68, 0.72, variant="random")])])
    for extra in ((), ("--list-versions",)):
        res = run_cli("table", "--store", str(tmp_path / "store"), *extra)
        assert res.returncode == 0, res.stderr[-2000:]
        assert "\u202e" not in res.stdout and SHOWN in res.stdout, res.stdout
    res = run_cli("table", "--store", str(tmp_path / "store"), "--format", "json")
    assert res.returncode == 0 and "\u202e" not in res.stdout
    assert PAYLOAD in json.dumps(json.loads(res.stdout), ensure_ascii=False)   # the data, unchanged
