"""The report's per-object section (evalsuite/report/objects.py): table, one small-multiples figure,
escaped object names, and what it says when there is nothing to compare."""
from __future__ import annotations

import re

from evalsuite.report import build_report
from evalsuite.store import Store
from tests.unit.test_objects import chair_result, unlearned, write
from tests.unit.test_report import section

EVIL = '<img src=x onerror="document.body.dataset.pwned=1">'


def test_section_has_table_plot_and_escaped_names(tmp_path):
    """cat unlearned (rate 0.5 -> 0 -> 0), and an object with markup in its name hallucinated by iter_2."""
    base, later = unlearned(20)
    last = [(m + ([EVIL] if i < 3 else []), g) for i, (m, g) in enumerate(later)]
    later = [(m + ([EVIL] if i == 0 else []), g + ([EVIL] if i == 0 else [])) for i, (m, g) in enumerate(later)]
    base = [(m + ([EVIL] if i == 0 else []), g + ([EVIL] if i == 0 else [])) for i, (m, g) in enumerate(base)]
    store = Store(tmp_path / "store")
    for it, caps in enumerate((base, later, last)):
        write(store, it, [chair_result(caps)])
    html = build_report(store, tmp_path / "r", n_boot=200).read_text()
    sec = section(html, "objects")
    assert 'class="empty"' not in sec
    assert "<h3>chair <span class=\"tag setup\">original</span>: iter_0 → iter_2</h3>" in sec
    assert sec.count('<svg class="plot"') == 1
    rows = re.findall(r"<tr><td data-v=\"([^\"]*)\"><b>", sec)
    # sorted by Δ rate: cat falls 0.5, dog stays 0, the markup object rises 0 -> 1 (3 of 3 mentions hallucinated)
    assert rows == ["cat", "dog", "&lt;img src=x onerror=&#34;document.body.dataset.pwned=1&#34;&gt;"]
    cat = sec[sec.index('data-v="cat"'):].split("</tr>")[0]
    assert 'class="better"' in cat and "0.500 <span class=\"ci\">(10/20)</span>" in cat
    assert "0.000 <span class=\"ci\">(0/10)</span>" in cat       # iter_1 and iter_2: 10 true cats
    # every checkpoint of the lineage is a column
    assert [h for h in re.findall(r'<th data-type="num">([^<]*)<br>', sec)] == ["iter_0", "iter_1", "iter_2"]
    assert "<img src=x" not in html and "onerror=\"document" not in html
    # the figure's text is escaped by matplotlib's SVG writer
    svg = sec[sec.index("<svg"):sec.index("</svg>")]
    assert "&lt;img" in svg and "cat" in svg


def test_demo_like_store_has_the_section(tmp_path):
    """tests/report_data's demo store: cat is hallucinated in the base and gone by iter_2 (no rate to
    compare), and still shows as a fall in hallucinated cats per image."""
    from tests.report_data import demo_store

    store = demo_store(tmp_path)
    html = build_report(store, tmp_path / "r", n_boot=200).read_text()
    sec = section(html, "objects")
    assert "demo/base → demo/iter_2" in sec and sec.count('<svg class="plot"') == 1
    assert "Mentioned by one of the two only (no rate to compare): cat (1.000 (5/5) → – (0/0); " \
           "Δ hallucinated / image -0.500 [" in sec
    assert '<a href="#objects">Objects</a>' in html


def test_no_object_records_and_no_pair_say_so(tmp_path):
    from evalsuite.types import MetricValue, TaskResult

    store = Store(tmp_path / "a")
    write(store, 0, [TaskResult("pope", "1", [MetricValue("acc", 0.8, True, 2)], samples=[{"key": "q", "answer": "y"}])])
    sec = section(build_report(store, tmp_path / "ra").read_text(), "objects")
    assert "No per-sample object records" in sec
    store = Store(tmp_path / "b")
    write(store, 0, [chair_result([(["dog"], ["dog"])] * 3)])
    sec = section(build_report(store, tmp_path / "rb").read_text(), "objects")
    assert "No per-object comparison: chair: no two checkpoints of one lineage" in sec


def test_checkpoints_that_mention_nothing_say_so(tmp_path, capsys):
    """The tiny demo's untrained model names no object: the section and the table say so, no empty plot."""
    from evalsuite.cli import main

    store = Store(tmp_path / "s")
    for it in (0, 1):
        write(store, it, [chair_result([([], ["dog"])] * 3)])
    sec = section(build_report(store, tmp_path / "r").read_text(), "objects")
    assert "Neither checkpoint mentions any object." in sec and "<svg" not in sec and "<table" not in sec
    assert main(["table", "--store", str(store.path), "--by", "object"]) == 0
    assert "| (neither mentions any object) |" in capsys.readouterr().out


def test_checkpoints_the_browsers_leave_out_keep_their_objects(tmp_path):
    """With the browsers capped below the lineage's length (--max-ckpts), the per-object table still has
    every checkpoint's counts: the statistics read every record's objects, not only the browsed ones'."""
    base, later = unlearned(20)
    store = Store(tmp_path / "store")
    for it, caps in enumerate((base, later, later, later)):
        write(store, it, [chair_result(caps)])
    sec = section(build_report(store, tmp_path / "r", n_boot=200, max_ckpts=2).read_text(), "objects")
    assert re.findall(r'<th data-type="num">([^<]*)<br>', sec) == ["iter_0", "iter_1", "iter_2", "iter_3"]
    cat = sec[sec.index('data-v="cat"'):].split("</tr>")[0]
    assert cat.count("0.000 <span class=\"ci\">(0/10)</span>") == 3   # iter_1 and iter_2 are not browsed
