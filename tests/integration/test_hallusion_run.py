"""`evalsuite run --tasks hallusion` end to end (in process): the tiny kit VLM answers yes/no questions about
objects present in / absent from synthetic-world images, a fake OpenAI-compatible judge (tests/judge_fake.py)
judges. Judge mode and rule mode are two results (two identities); each is stored once and served from the
store on a second run; records without an image are not asked; a judge that ignores the format fails in
one line and stores nothing; bad data is one line before any model loads.
Under two ranks: tests/integration/test_judged_two_ranks.py."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evalsuite.cli import main as cli_main
from evalsuite.metrics import hallusion as hb
from tests.judge_fake import FakeJudge


@pytest.fixture
def hb_data(world_dir, tmp_path) -> tuple[Path, Path, list[dict]]:
    """HallusionBench.json over 4 world images: VD figure set 0 (figures 0, 1) and VS chart set 0 (figure 0
    without an image, figures 1, 2), two questions each ("Is there a X?" for X present in the first image, and
    for a category absent from it); gt_answer from the world's annotations."""
    coco = json.loads(next((world_dir / "annotations").glob("instances_val*.json")).read_text())
    names = {c["id"]: c["name"] for c in coco["categories"]}
    images = sorted(coco["images"], key=lambda im: im["id"])[:4]
    present = {im["id"]: {names[a["category_id"]] for a in coco["annotations"] if a["image_id"] == im["id"]}
               for im in images}
    first = min(present[images[0]["id"]])
    absent = min(set(names.values()) - present[images[0]["id"]])
    root = tmp_path / "hb"
    records = []
    layout = [("VD", "figure", [("0", "1", images[0]), ("1", "2", images[1])]),
              ("VS", "chart", [("0", "0", None), ("1", "1", images[2]), ("2", "2", images[3])])]
    for cat, sub, figs in layout:
        for fig, vis, im in figs:
            filename = None
            if im is not None:
                filename = f"./hallusion_bench/{cat}/{sub}/0_{fig}.png"
                src = next(world_dir.rglob(im["file_name"]))
                (root / filename).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(src, root / filename)
            for q, obj in enumerate((first, absent)):
                gt = "1" if im is not None and obj in present[im["id"]] else "0"
                records.append({"category": cat, "subcategory": sub, "visual_input": vis, "set_id": "0",
                                "figure_id": fig, "sample_note": "world", "question_id": str(q),
                                "question": f"Is there a {obj} in the image?",
                                "gt_answer_details": f"There is {'a' if gt == '1' else 'no'} {obj} in figure {fig}.",
                                "gt_answer": gt, "filename": filename})
    data = tmp_path / "HallusionBench.json"
    data.write_text(json.dumps(records))
    return data, root, records


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _stored(store: Path) -> int:
    return len(list((store / "metrics").glob("*.parquet"))) if (store / "metrics").is_dir() else 0


def _verdict(messages) -> str:
    """Judge mode: 'correct' when the answer has an even number of words, else 'incorrect' (deterministic)."""
    answer = messages[-1]["content"].rsplit("\nPrediction answer:", 1)[1].rsplit("\nOutput:", 1)[0]
    return "correct" if len(answer.split()) % 2 == 0 else "incorrect"


def test_hallusion_judge_and_rule_modes(tiny_vlm_dir, hb_data, tmp_path, capsys):
    data, root, records = hb_data
    store = tmp_path / "store"

    def run(out: str, *extra: str) -> int:
        return cli_main(["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "hallusion", f"hallusion.data={data}",
                         f"hallusion.image_root={root}", "hallusion.n_boot=0", "--judge", fake.url,
                         "--judge-model", "judge-a", "judge.max_concurrency=2", "judge.retries=0",
                         "--max-new-tokens", "4", "--device", "cpu", "--store", str(store),
                         "--output", str(tmp_path / out), *extra])

    with FakeJudge(reply=_verdict) as fake:
        assert run("j1") == 0
        j1 = _summary(tmp_path / "j1")["hallusion"]
        asked = [r for r in records if r["visual_input"] != "0"]
        assert len(fake.requests) == len(asked) == 8 and _stored(store) == 1
        assert j1["extra"]["no_image_skipped"] == 2 and j1["extra"]["mode"] == "judge"
        assert j1["identity"]["mode"] == "judge" and j1["identity"]["judge"]["model"] == "judge-a"
        assert j1["identity"]["judge"]["prompt"] == "hallusion-lmms-eval-0.7.3-1"
        # what the judge said decides each record (its prompt names it): the released rules on those verdicts
        by_prompt = {}
        for r in fake.requests:
            text = r["messages"][0]["content"]
            q = text.split("Question:", 1)[1].split("\nReference answer: ", 1)
            by_prompt[(q[0], q[1].split("\nPrediction answer:", 1)[0])] = _verdict(r["messages"])
        scored = [{**r, "correct": by_prompt[(r["question"], r["gt_answer_details"])] == "correct"} for r in asked]
        expected = hb.released_scores(scored, "judge")
        metrics = {m["metric"]: m["value"] for m in j1["metrics"]}
        assert {k: metrics[k] for k in expected} == pytest.approx(expected)
        assert j1["extra"]["released"] == {k: round(v, 4) for k, v in expected.items()}
        assert metrics["unparsable_rate"] == 0 and {"aAcc_VD", "fAcc_VS", "qAcc_VD"} <= set(metrics)

        assert run("j2") == 0       # served from the store: the judge is not asked
        assert _summary(tmp_path / "j2")["hallusion"]["reused"] and len(fake.requests) == 8 and _stored(store) == 1

        # rule mode: another identity; only answers the rule cannot read go to the judge, the first time
        # each is asked it says Unknown (asked again at temperature 0.5), then Yes
        seen: dict[str, int] = {}

        def match(messages):
            text = messages[-1]["content"]
            seen[text] = seen.get(text, 0) + 1
            return "Unknown" if seen[text] == 1 else "Yes"

        fake.reply = match
        before = len(fake.requests)
        assert run("r1", "hallusion.mode=rule") == 0
        r1 = _summary(tmp_path / "r1")["hallusion"]
        assert r1["eval_key"] != j1["eval_key"] and _stored(store) == 2
        assert r1["identity"]["judge"]["prompt"] == "hallusion-vlmevalkit-e8e78f05-1"
        new = fake.requests[before:]
        assert all("Your output: " in r["messages"][0]["content"] for r in new)
        first = [r["messages"][0]["content"] for r in new if r["temperature"] == 0.0]
        again = [r["messages"][0]["content"] for r in new if r["temperature"] == 0.5]
        assert len(first) + len(again) == len(new) and set(again) <= set(first)
        # an answer the rule reads is not sent; every answer sent was one it could not read
        assert r1["extra"]["judged"] == len(first) and r1["extra"]["unparsable"] == 0
        assert all(hb.yorn_extract(t.rsplit("\nAnswer: ", 1)[1].rsplit("\nYour output: ", 1)[0]) == "Unknown"
                   for t in first)
        rmetrics = {m["metric"]: m["value"] for m in r1["metrics"]}
        assert 0 <= rmetrics["aAcc"] <= 100 and "fAcc" in rmetrics

        assert run("r2", "hallusion.mode=rule") == 0
        assert _summary(tmp_path / "r2")["hallusion"]["reused"] and len(fake.requests) == before + len(new)

        # a judge that never says correct / incorrect / unclear: one line, nothing stored
        fake.models.append("judge-b")
        fake.reply = lambda messages: "I cannot say."
        capsys.readouterr()
        assert run("b", "--judge-model", "judge-b") == 1
        err = capsys.readouterr().err
        assert "hallusion: 8 of 8 judge replies say none of correct / incorrect / unclear" in err
        assert "nothing stored" in err and _stored(store) == 2


def test_hallusion_bad_data_refused_before_generation(tiny_vlm_dir, hb_data, tmp_path, capsys):
    data, root, records = hb_data
    base = ["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "hallusion", f"hallusion.image_root={root}",
            "--judge", "http://127.0.0.1:9/v1", "--judge-model", "x", "judge.retries=0", "--device", "cpu",
            "--store", str(tmp_path / "store")]
    bad = tmp_path / "bad.json"
    cases = [
        ([{k: v for k, v in records[0].items() if k != "set_id"}], "record 0: field 'set_id' missing"),
        ([{**records[0], "category": "VX"}], "record 0: field 'category' is 'VX'"),
        ([{**records[0], "gt_answer": "yes"}], "record 0: field 'gt_answer' is 'yes'"),
        ([records[0], records[0]], "record 1: the same category/subcategory/set_id/figure_id/question_id"),
        ([{**records[0], "filename": "./hallusion_bench/VD/figure/9_9.png"}], "9_9.png: no such file (record 0"),
        ([{**records[0], "filename": None}], "record 0: field 'filename' missing"),
        ([r for r in records if r["visual_input"] == "0"], "no record with an image"),
    ]
    for value, msg in cases:
        bad.write_text(json.dumps(value))
        capsys.readouterr()
        assert cli_main([*base, f"hallusion.data={bad}"]) == 2, msg
        err = capsys.readouterr().err.strip().splitlines()
        assert any(msg in line for line in err), (msg, err)
    capsys.readouterr()
    assert cli_main([*base, f"hallusion.data={data}", "hallusion.mode=exact"]) == 2
    assert "hallusion.mode" in capsys.readouterr().err
    assert not (tmp_path / "store" / "metrics").exists()
