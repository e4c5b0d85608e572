"""HTML report: self-contained, sections filled from the store, escaping, marks, colours, bounds."""
from __future__ import annotations

import argparse
import re
from html.parser import HTMLParser

import pytest
from PIL import Image

from evalsuite.errors import UserError
from evalsuite.report import build_report
from evalsuite.report.samples import mark_answer
from evalsuite.store import Store
from evalsuite.types import MetricValue, TaskResult

PAYLOAD = '<script>document.body.dataset.pwned="1"</script><img src=x onerror="document.body.dataset.pwned=2">'


def _image(path, color):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (64, 48), color).save(path)
    return str(path)


def _chair_sample(i, image, answer, words_hal):
    mentioned, pos = [], 0
    for w, hal in words_hal:
        pos = answer.index(w, pos)
        mentioned.append({"word": w, "category": w, "position": pos, "hallucinated": hal})
    hal = [m["word"] for m in mentioned if m["hallucinated"]]
    return {"key": f"val:{i}", "image_id": i, "image": image, "prompt": "Describe the image.", "answer": answer,
            "mentioned": mentioned, "hallucinated": hal, "gt": ["dog"], "chair_s": int(bool(hal))}


def make_store(tmp_path, n_images=6, payload_in=None):
    """Three iterations: CHAIRs falls 0.5 -> 0.3 -> 0.2 (CIs +-0.05, so both deltas significant),
    relevance rises, POPE f1 flat; csr_pairs rows for iterations 1 and 2; iteration 2 answers image 0
    with `payload_in` when given."""
    store = Store(tmp_path / "store")
    imgs = [_image(tmp_path / "img" / f"{i}.png", (40 * i % 255, 120, 200)) for i in range(n_images)]
    for it, cs in enumerate((0.5, 0.3, 0.2)):
        chair, rel = [], []
        for i in range(n_images):
            hal = it == 0 or (it == 1 and i % 2 == 0)
            answer = "A dog next to a cat." if hal else "A dog on the grass."
            if payload_in and it == 2 and i == 0:
                answer = f"A dog {payload_in}"
            words = [("dog", False)] + ([("cat", True)] if hal else [])
            chair.append(_chair_sample(i, imgs[i], answer, words))
            rel.append({"key": f"val:{i}", "image_id": i, "image": imgs[i], "prompt": "Describe the image.",
                        "answer": answer, "relevance": 0.4 + 0.1 * it + 0.01 * i, "relevance_sentences": [0.5]})
        results = [
            TaskResult("chair", "1", [MetricValue("CHAIRs", cs, False, n_images, cs - 0.05, cs + 0.05),
                                      MetricValue("recall", 0.9, True, n_images, 0.85, 0.95)], samples=chair),
            TaskResult("relevance", "1", [MetricValue("relevance_mean", 0.4 + 0.1 * it, True, n_images)],
                       samples=rel),
            TaskResult("pope", "0.0", [MetricValue("f1", 0.8, True, 300, 0.78, 0.82, variant="random")]),
        ]
        if it:
            pairs = [{"id": f"p{it}-{j}", "image": imgs[j], "prompt": "Describe.", "chosen": "A dog.",
                      "rejected": "A dog and a cat.", "chosen_reward": 1.0 + it + 0.1 * j,
                      "rejected_reward": 0.5 + 0.05 * j, "chosen_relevance": 0.6 + 0.02 * j,
                      "rejected_relevance": 0.4 + 0.03 * j} for j in range(4)]
            results.append(TaskResult("csr_pairs", "1", [
                MetricValue("chosen_reward_mean", 1.15 + it, True, 4), MetricValue("rejected_reward_mean", 0.575, True, 4),
                MetricValue("reward_gap", 0.575 + it, True, 4), MetricValue("num_pairs", 4, True)], samples=pairs))
        store.write_run({"ckpt": f"/ckpts/iter{it}", "ckpt_hash": f"{it:064x}", "iteration": it,
                         "parent": f"/ckpts/iter{it - 1}" if it else None,
                         "method": "base" if it == 0 else "csr", "config": {"lr": 1e-6, "note": "<b>x</b>"},
                         "code_version": "0.1.0+test", "lmms_eval_version": "0.7.3"}, results)
    return store


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs, self.tags = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self.refs += [v for k, v in attrs if k in ("src", "href", "action", "xlink:href", "srcset") and v]


def parse(html):
    p = _Refs()
    p.feed(html)
    return p


def section(html: str, sec: str) -> str:
    """The body of `<section id="sec">`."""
    m = re.search(rf'<section id="{sec}">(.*?)</section>', html, re.S)
    assert m, sec
    return m.group(1)


def test_report_is_self_contained_with_all_sections(tmp_path):
    store = make_store(tmp_path)
    path = build_report(store, tmp_path / "reports" / "r1")
    assert path == tmp_path / "reports" / "r1" / "index.html"
    assert [p.name for p in path.parent.iterdir()] == ["index.html"]
    html = path.read_text()
    doc = parse(html)
    assert doc.refs and all(r.startswith(("data:", "#")) for r in doc.refs)
    assert not [t for t, _ in doc.tags if t in ("link", "iframe", "object", "embed")]
    assert "http://" not in html.replace("http://www.w3.org/", "") and "https://" not in html
    # every section is filled from the store: none shows its "nothing in this store selection" text
    # (the section ids themselves are static template text, present in an empty report too)
    for sec in ("headline", "summary", "iterations", "csr", "relevance", "samples", "provenance"):
        assert 'class="empty"' not in section(html, sec), sec
    # this store has no trainer logs and no per-question POPE/MME records: said, not hidden
    for sec in ("training", "questions"):
        assert '<p class="empty">' in section(html, sec), sec
    assert html.count("<svg class=\"plot\"") == 4 + 2 + 2     # 4 metrics x iterations, csr 2, densities 2
    # one thumbnail per caption image, and one per widest-gap pair (4 per generating checkpoint)
    assert html.count('src="data:image/png;base64,') == 6 + 2 * 4
    assert "currentColor" in html and "@media (prefers-color-scheme: dark)" in html
    # provenance: hashes, versions and the (escaped) config
    assert "0.1.0+test" in html and "lmms-eval 0.7.3" in html and "&lt;b&gt;x&lt;/b&gt;" in html


def test_lower_is_better_deltas_are_coloured_as_improvements(tmp_path):
    """CHAIRs 0.5 -> 0.3: delta -0.2, CI -0.2 +- sqrt(2)*0.05 = [-0.271, -0.129] excludes 0 -> better
    (the store's synthetic records do not reproduce 0.5/0.3, so the stored CIs are combined: "indep.").
    POPE f1 flat: delta 0, its CI includes 0 -> not coloured ("ns"). relevance has no CI (its records do not reproduce the stored
    mean either): +0.1 is not coloured and says "no CI"."""
    html = build_report(make_store(tmp_path), tmp_path / "r").read_text()
    rows = re.findall(r"<tr data-metric=[^>]*>\s*<td data-v=\"(\w+?)\".*?</tr>", html, flags=re.S)
    assert rows[:4] == ["CHAIRs", "relevance_mean", "f1random", "recall"]     # each task's lead metric first
    chair_row = re.search(r'<td data-v="CHAIRs">.*?</tr>', html, flags=re.S).group(0)
    assert re.findall(r'class="(better|worse)[^"]*"', chair_row) == ["better", "better"]
    assert "Δ -0.200</span> <span class=\"ci\">[-0.271, -0.129]</span> <span class=\"tag\">indep.</span>" in chair_row
    rel_row = re.search(r'<td data-v="relevance_mean">.*?</tr>', html, flags=re.S).group(0)
    assert 'class="noci"' in rel_row and '<span class="tag">no CI</span>' in rel_row
    assert "class=\"better" not in rel_row
    f1_row = re.search(r'<td data-v="f1random">.*?</tr>', html, flags=re.S).group(0)
    assert re.findall(r'<td data-v="[^"]*" class="([^"]*)"', f1_row) == ["", "ns", "ns"]


def test_per_sample_view_marks_objects_and_escapes_payloads(tmp_path):
    html = build_report(make_store(tmp_path, payload_in=PAYLOAD), tmp_path / "r").read_text()
    assert PAYLOAD not in html and "<img src=x" not in html
    assert "&lt;script&gt;document.body.dataset.pwned=&#34;1&#34;&lt;/script&gt;" in html
    assert not [a for t, a in parse(html).tags if any(k.startswith("on") for k in a)]
    assert html.count("<script") == 1
    assert '<mark class="hal">cat</mark>' in html and '<mark class="ok">dog</mark>' in html
    assert "<span class=\"chip hal\">CHAIR_s 1</span>" in html and "relevance 0.600" in html


def test_sample_view_is_bounded_and_paged(tmp_path):
    html = build_report(make_store(tmp_path, n_images=9), tmp_path / "r", max_images=5, page_size=2).read_text()
    assert html.count('<article class="sample item"') == 5
    assert "5 of 9 image/prompt groups" in html and 'data-page-size="2"' in html
    assert len(re.findall(r'<article class="sample item" data-flags="[^"]*" hidden>', html)) == 3   # pages 2, 3


def test_report_without_training_pairs_says_so(tmp_path):
    store = Store(tmp_path / "s")
    store.write_run({"ckpt": "/c/0", "iteration": 0}, [TaskResult("pope", "0", [MetricValue("f1", 0.8, True, n=300)])])
    html = build_report(store, tmp_path / "r").read_text()
    assert "No <code>csr_pairs</code> rows" in html and "No per-sample caption records" in html
    assert "No <code>csr_train</code> runs" in html and "No per-question records" in html


def test_report_command_and_empty_store(tmp_path, capsys):
    from evalsuite.commands import report

    make_store(tmp_path)
    ns = argparse.Namespace(store=str(tmp_path / "store"), out=str(tmp_path / "out"), as_of="1", run=None, base=None,
                            max_images=10, page_size=4, image_root=[], title="iter0 only", max_questions=10,
                            n_boot=200, seed=0, ckpt=[], max_ckpts=6)
    assert report.main(ns) == 0
    html = (tmp_path / "out" / "index.html").read_text()
    assert "<title>iter0 only</title>" in html and "as of store version 1" in html
    assert "iter1" not in html.split('<section id="provenance">')[0]
    Store(tmp_path / "empty").metrics_dir.mkdir(parents=True)
    with pytest.raises(UserError, match="no metric rows"):
        build_report(Store(tmp_path / "empty"), tmp_path / "o2")


def test_mark_answer_positions_and_fallbacks():
    """Char offsets, merged-token indices and plain search all land on the word; unknown words are skipped."""
    parts = mark_answer("Two dogs and a hot dog, no cat.", [
        {"word": "dog", "position": 4, "hallucinated": False},        # char offset; plural marked
        {"word": "hot dog", "position": 4, "hallucinated": True},     # token index 4 -> "hot"
        {"word": "cat", "hallucinated": True},                        # no position: searched
        {"word": "zebra", "position": 0, "hallucinated": True}])
    assert parts == [("Two ", None), ("dogs", "ok"), (" and a ", None), ("hot dog", "hal"), (", no ", None),
                     ("cat", "hal"), (".", None)]
    assert mark_answer("", []) == []
    assert mark_answer("concatenate", [{"word": "cat", "hallucinated": True}]) == [("concatenate", None)]


def test_relevance_densities_have_one_curve_per_set(tmp_path):
    """Per checkpoint (3 x 6 captions) and per training iteration chosen/rejected (2 x 2 x 4 pairs)."""
    html = build_report(make_store(tmp_path), tmp_path / "r").read_text()
    rel = html.split('<section id="relevance">')[1].split("</section>")[0]
    for label in ("iter0 (n=6)", "iter1 (n=6)", "iter2 (n=6)", "it1 chosen (n=4)", "it1 rejected (n=4)",
                  "it2 chosen (n=4)", "it2 rejected (n=4)"):
        assert label in rel
    assert "#010203" not in html and rel.count("currentColor") > 10    # axes follow the page colours


def test_cell_reads_the_chair_task_record_shape():
    """The CHAIR task's own record (metrics.chair.score_caption): mentions [[w, c]], merged-token
    positions, hallucinated_positions, gt_objects, CHAIRs. "A dog and two cats": merged tokens
    a/dog/and/two/cat -> dog at 1 (grounded), cat at 4 (not in GT {dog}: hallucinated)."""
    from evalsuite.metrics.chair import score_caption
    from evalsuite.report.samples import cell

    rec = {"answer": "A dog and two cats.", **score_caption([("dog", "dog", 1), ("cat", "cat", 4)], ["dog"], 5)}
    c = cell(rec)
    assert c["segments"] == [("A ", None), ("dog", "ok"), (" and two ", None), ("cats", "hal"), (".", None)]
    assert (c["hal"], c["ok"], c["gt"], c["chair_s"]) == (["cat"], ["dog"], ["dog"], 1.0)


def test_relative_image_paths_resolve_against_the_runs_data_root(tmp_path):
    _image(tmp_path / "world" / "images" / "val" / "7.png", (10, 200, 10))
    store = Store(tmp_path / "s")
    sample = {"key": "val:7", "image_id": 7, "image": "images/val/7.png", "prompt": "p", "answer": "A dog."}
    store.write_run({"ckpt": "/c/0", "iteration": 0, "data_root": str(tmp_path / "world")},
                    [TaskResult("caption", "1", [MetricValue("n", 1, True)], samples=[sample])])
    html = build_report(store, tmp_path / "r").read_text()
    assert html.count('src="data:image/') == 1 and "no image" not in html


def test_two_setups_are_two_labelled_rows_without_cross_deltas(tmp_path):
    """iter0 scored with prompts A (0.5) and B (0.3), iter1 with A (0.4): the summary has a row per
    setup, tagged by the prompt; iter1's delta (-0.100) is against A only, and row B has no delta."""
    store = Store(tmp_path / "s")
    for it, prompt, v in ((0, "A", 0.5), (0, "B", 0.3), (1, "A", 0.4)):
        res = TaskResult("chair", "1", [MetricValue("CHAIRs", v, False, 8, v - 0.05, v + 0.05)],
                         identity={"prompt": prompt, "n_images": 8})
        store.write_run({"ckpt": f"/c/{it}", "ckpt_hash": f"h{it}", "iteration": it,
                         "parent": "/c/0" if it else None}, [res])
    html = build_report(store, tmp_path / "r").read_text()
    rows = re.findall(r'<td data-v="CHAIRs(prompt=[^"]*)">.*?</tr>', html, flags=re.S)
    assert rows == ["prompt=&#39;A&#39;", "prompt=&#39;B&#39;"]
    row_a, row_b = re.findall(r'<td data-v="CHAIRsprompt=.*?</tr>', html, flags=re.S)
    assert "Δ -0.100" in row_a and "Δ" not in row_b
    assert '<span class="tag setup">prompt=&#39;B&#39;</span>' in row_b


def test_report_reads_the_store_once(tmp_path, monkeypatch):
    """3 runs: each metrics file decoded once; checkpoints computed once; only the shown runs' samples read,
    each once."""
    from evalsuite.store import table

    store = make_store(tmp_path)
    store.write_run({"ckpt": "/ckpts/iter0", "ckpt_hash": f"{0:064x}", "iteration": 0},
                    [TaskResult("chair", "1", [MetricValue("CHAIRs", 0.45, False, 6)],
                                samples=[{"key": "old", "image_id": 99, "answer": "superseded", "prompt": "p"}])])
    store.write_run({"ckpt": "/ckpts/iter0", "ckpt_hash": f"{0:064x}", "iteration": 0},
                    [TaskResult("chair", "1", [MetricValue("CHAIRs", 0.5, False, 6)])])
    from evalsuite.store import store as store_module
    from evalsuite.store.store import Snapshot

    reads, ckpt_calls, sample_runs = [], [], []
    real_read, real_ckpts, real_samples = store_module.read_file, table.checkpoints, Snapshot.sample_records
    monkeypatch.setattr(store_module, "read_file", lambda p: reads.append(p) or real_read(p))
    monkeypatch.setattr(table, "checkpoints", lambda df: ckpt_calls.append(1) or real_ckpts(df))
    monkeypatch.setattr(Snapshot, "sample_records", lambda self, task=None, run_id=None, *a, **kw:
                        sample_runs.append(set(run_id)) or real_samples(self, task, run_id, *a, **kw))
    html = build_report(store, tmp_path / "r").read_text()
    assert len(reads) == 5 and len(ckpt_calls) == 1
    read = [r for runs in sample_runs for r in runs]
    assert len(read) == len(set(read)) == 4 and "superseded" not in html    # each shown run's samples once


def test_y_axis_never_zooms_into_noise():
    """POPE accuracy 0.5047 .. 0.5074 without CIs: the axis spans a tenth of 0.5074 (0.0507), centred,
    not the 0.0027 the values cover. With CIs the axis holds them. A non-negative metric's padded axis
    starts at 0, and an all-zero metric gets a unit axis."""
    from evalsuite.report.plots import y_limits

    lo, hi = y_limits([0.5047, 0.506, 0.5053, 0.5074], [], [])
    assert hi - lo == pytest.approx(0.05074) and lo < 0.5047 and hi > 0.5074
    lo, hi = y_limits([0.196, 0.012], [0.16, 0.005], [0.23, 0.02])
    assert lo == 0.0 and hi > 0.23
    assert y_limits([0.0, 0.0], [], []) == (0.0, 1.0)


def test_only_rows_that_vary_together_collapse(tmp_path):
    """relevance_mean and _whole_mean are 0.5 then 0.6 in both checkpoints: one row. CHAIRs and CHAIRi
    are 0 everywhere: equal by chance, so two rows."""
    store = Store(tmp_path / "s")
    for it in range(2):
        res = [TaskResult("relevance", "1", [MetricValue("relevance_mean", 0.5 + 0.1 * it, True, 4),
                                             MetricValue("relevance_whole_mean", 0.5 + 0.1 * it, True, 4)]),
               TaskResult("chair", "1", [MetricValue("CHAIRs", 0.0, False, 4), MetricValue("CHAIRi", 0.0, False, 4)])]
        store.write_run({"ckpt": f"/c/{it}", "ckpt_hash": f"h{it}", "iteration": it, "parent": "/c/0" if it else None},
                        res)
    html = build_report(store, tmp_path / "r").read_text()
    keys = re.findall(r'<tr data-metric="[^"]*" data-key="([^"]*)"', html)
    assert keys == ["relevance/relevance_mean", "chair/CHAIRs", "chair/CHAIRi"]
    assert "= relevance_whole_mean (equal values)" in html


def test_browsers_show_at_most_n_checkpoints_and_name_the_others(tmp_path):
    """Issue 37: a lineage of 5 checkpoints and an unrelated one, --max-ckpts 3, --ckpt iter2: the caption
    and question browsers show iter2, the lineage's base and its latest; the page names the 3 left out and
    where their data is; the summary keeps every checkpoint."""
    from tests.report_data import chair_result, image, pope_result

    store = Store(tmp_path / "s")
    imgs = [image(tmp_path / "img" / f"{i}.png", (30 * i, 90, 160)) for i in range(4)]
    ckpts = [(f"/ck/iter{i}", i, f"/ck/iter{i - 1}" if i else None) for i in range(5)] + [("/other/solo", None, None)]
    for n, (path, it, parent) in enumerate(ckpts):
        answers = {0: f"A dog number {n}."}          # answers differ, so every image is a changed row
        store.write_run({"ckpt": path, "ckpt_hash": f"h{n}", "iteration": it, "parent": parent},
                        [chair_result(imgs, {n % 4}, answers), pope_result(["yes", "no"] * 3)])
    html = build_report(store, tmp_path / "r", ckpts=["iter2"], max_ckpts=3, n_boot=50).read_text()
    captions = html.split('<section id="samples">')[1].split("</section>")[0]
    questions = html.split('<section id="questions">')[1].split("</section>")[0]
    assert re.findall(r'<div class="who">(.*?)</div>', captions)[:3] == ["iter0", "iter2", "iter4"]
    assert len(set(re.findall(r'<div class="who">(.*?)</div>', captions))) == 3
    heads = re.findall(r"<th>(.*?)</th>", questions.split("</thead>")[0])
    assert heads[-3:] == ["iter0", "iter2", "iter4"] and "iter1" not in heads and "solo" not in heads
    for section in (captions, questions):
        assert "Checkpoints shown here: 3 of 6" in section
        assert "Not shown: iter1, iter3, solo." in section and "evalsuite table --store" in section
    summary = html.split('<section id="summary">')[1].split("</section>")[0]
    assert all(name in summary for name in ("iter1", "iter3", "solo"))
    with pytest.raises(UserError, match="--ckpt 'nope'"):
        build_report(store, tmp_path / "r2", ckpts=["nope"], max_ckpts=3, n_boot=50)


def test_one_stand_alone_run_is_named_by_its_folders_and_counted_in_the_singular(tmp_path):
    """Issue 38: a lone checkpoint in .../iter_2/merged reads "iter_2/merged", and the header says
    "1 checkpoint", "1 run"."""
    from tests.report_data import chair_result, image

    store = Store(tmp_path / "s")
    imgs = [image(tmp_path / "img" / f"{i}.png", (30 * i, 90, 160)) for i in range(3)]
    store.write_run({"ckpt": "/runs/csr/iter_2/merged", "ckpt_hash": "h"}, [chair_result(imgs, {0})])
    html = build_report(store, tmp_path / "r", n_boot=50).read_text()
    head = html.split("</header>")[0]
    assert " 1 run · 1 checkpoint · " in head
    assert "iter_2/merged" in html.split('<section id="summary">')[1]


def test_pair_statistics_fit_the_page_and_the_reward_gap_has_a_bootstrap_ci(tmp_path):
    """Issue 38: the chosen/rejected table is not in a horizontal scroller (short, wrapping heads), and the
    reward gap carries the percentile bootstrap CI over the run's per-pair gaps, computed here by hand."""
    import numpy as np

    from evalsuite.metrics.stats import resample_counts
    from evalsuite.store.table import fmt
    from tests.report_data import demo_store

    store = demo_store(tmp_path)
    html = build_report(store, tmp_path / "r", n_boot=200, seed=3).read_text()
    section = html.split('<section id="csr">')[1].split("</section>")[0]
    assert '<table class="sortable fit">' in section and 'class="scroll"' not in section
    assert '<th data-type="num" title="reward_gap">reward gap [95% CI]</th>' in section
    gaps = np.array([(0.9 - 0.05 * j) - (0.3 + 0.02 * j) for j in range(5)])     # report_data.pairs_result
    reps = np.array([c @ gaps / 5 for c in resample_counts(5, 200, 3)]).ravel()
    low, high = np.percentile(reps, [2.5, 97.5])
    assert f"{fmt(gaps.mean())} [{fmt(low, signed=True)}, {fmt(high, signed=True)}]" in section


def test_judged_rows_name_their_judge_and_never_pair_two_judges(tmp_path):
    """mmhal scored by judge A (c0, c1) and by a server judge B whose model id is markup (c1, c2): each
    summary row is one judge and names it, escaped; c1's delta under A is +1.000 (paired); under B, where
    the base has only A's score, the cells say "judge differs" and name the base's judge instead of a delta."""
    from tests.report_data import JUDGE_B, judged_store

    store = judged_store(tmp_path, judge_b={**JUDGE_B, "model": PAYLOAD, "served": {"id": PAYLOAD}},
                         reply_b=PAYLOAD + " ")
    html = build_report(store, tmp_path / "r", n_boot=200).read_text()
    assert PAYLOAD not in html and "<img src=x" not in html and html.count("<script") == 1
    assert not [a for t, a in parse(html).tags if any(k.startswith("on") for k in a)]
    summary = section(html, "summary")
    rows = re.findall(r'<tr data-metric="score" data-key="mmhal/score".*?</tr>', summary, flags=re.S)
    assert len(rows) == 2
    row_a = next(r for r in rows if "judge qwen-judge-a@a1b2c3d4" in r)
    row_b = next(r for r in rows if r is not row_a)
    assert '<span class="tag judge"' in row_b and "judge &lt;script&gt;document" in row_b
    assert "Δ +1.000" in row_a and "judge differs" not in row_a
    assert row_b.count("Δ judge differs") == 2 and "(base: qwen-judge-a@a1b2c3d4)" in row_b
    assert not re.search(r"Δ [+-]\d", row_b)
    head = section(html, "headline")
    assert "From <b>0</b> to <b>1</b>" in head and "Not compared, the base was scored by another judge: " \
        "score [judge=&#39;&lt;script&gt;document" in head and "base: qwen-judge-a@a1b2c3d4)" in head
    # the answer browser: each judged answer with its judge's reply, named and escaped
    samples = section(html, "samples")
    replies = re.findall(r'<details class="judgment small"><summary>(.*?)</summary><div class="judge-text">(.*?)</div>',
                         samples)
    assert ("mmhal judge qwen-judge-a@a1b2c3d4: rating 3", "rating: 3") in replies
    assert ("mmhal judge &lt;script&gt;document.body.dataset.pwned=&#34;1&#34;&lt;/script&gt;&lt;img src=x "
            "onerror=&#34;document.body.dataset.pwned=2&#34;&gt;: rating 4",
            "&lt;script&gt;document.body.dataset.pwned=&#34;1&#34;&lt;/script&gt;&lt;img src=x "
            "onerror=&#34;document.body.dataset.pwned=2&#34;&gt; rating: 4") in replies
    chair = re.search(r'<tr data-metric="CHAIRs".*?</tr>', summary, flags=re.S).group(0)
    assert "tag judge" not in chair and "Δ -0.200" in chair
