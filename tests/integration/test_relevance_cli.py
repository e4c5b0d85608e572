"""`evalsuite relevance pairs` and `evalsuite run --tasks caption,relevance` through the real CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import cli_inprocess, run_cli


@pytest.fixture(scope="module")
def pair_files(world_dir, tmp_path_factory):
    """The same 4 pairs as a LLaVA-style .json and as a plain_dpo .jsonl, images relative to images/val."""
    d = tmp_path_factory.mktemp("pairs")
    names = sorted(p.name for p in (world_dir / "images" / "val").iterdir())[:4]
    chosen = ["a red cube. a blue ball.", "there is a cat on the left", "two dog!", "sky and grass. a cone"]
    rejected = ["a green cone", "", "a big big ball. three cat.", "a red cube"]
    llava = [{"id": i, "image": n,
              "conversations": [{"from": "human", "value": "<image>\nDescribe."}, {"from": "gpt", "value": c}],
              "rejected_conversations": [{"from": "human", "value": "<image>\nDescribe."}, {"from": "gpt", "value": r}]}
             for i, (n, c, r) in enumerate(zip(names, chosen, rejected))]
    (d / "llava.json").write_text(json.dumps(llava))
    (d / "plain.jsonl").write_text("".join(
        json.dumps({"image": n, "prompt": "Describe.", "chosen": c, "rejected": r}) + "\n"
        for n, c, r in zip(names, chosen, rejected)))
    return d, names, chosen, rejected


def _pairs(pair_file, root, clip, out, *extra):
    return run_cli("relevance", "pairs", "--pairs", str(pair_file), "--image-root", str(root),
                   "--clip", str(clip), "--output", str(out), *extra)


def test_pairs_both_formats_match_the_scorer(pair_files, world_dir, tiny_clip_dir, tmp_path):
    from evalsuite.metrics.relevance import RelevanceScorer

    d, names, chosen, rejected = pair_files
    root = world_dir / "images" / "val"
    r1 = _pairs(d / "llava.json", root, tiny_clip_dir, tmp_path / "a", "--plot")
    r2 = _pairs(d / "plain.jsonl", root, tiny_clip_dir, tmp_path / "b")
    assert r1.returncode == 0, r1.stderr
    assert r2.returncode == 0, r2.stderr
    assert r1.stdout.count("\n") == 1 and r1.stdout.startswith("relevance pairs: n=4 chosen ")
    rows = [json.loads(line) for line in (tmp_path / "a" / "pair_scores.jsonl").read_text().splitlines()]
    rows_b = [json.loads(line) for line in (tmp_path / "b" / "pair_scores.jsonl").read_text().splitlines()]
    assert [r["chosen_relevance"] for r in rows] == pytest.approx([r["chosen_relevance"] for r in rows_b], abs=1e-9)
    scorer = RelevanceScorer(tiny_clip_dir, device="cpu")
    for row, n, c, r in zip(rows, names, chosen, rejected):
        assert row["chosen_relevance"] == pytest.approx(scorer.score_response(root / n, c).mean, abs=1e-5)
        assert row["rejected_relevance"] == pytest.approx(scorer.score_response(root / n, r).mean, abs=1e-5)
        assert row["gap"] == pytest.approx(row["chosen_relevance"] - row["rejected_relevance"])
    assert rows[1]["rejected_relevance"] == 0.0   # empty rejected answer: documented 0
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    cs = np.array([r["chosen_relevance"] for r in rows])
    gaps = np.array([r["gap"] for r in rows])
    assert summary["n_pairs"] == 4 and summary["response_score"] == "sentence_mean"
    assert summary["chosen"]["mean"] == pytest.approx(cs.mean()) and summary["chosen"]["std"] == pytest.approx(cs.std())
    assert summary["chosen"]["median"] == pytest.approx(np.median(cs))
    assert summary["gap"]["mean"] == pytest.approx(gaps.mean())
    assert summary["gap"]["ci_low"] <= summary["gap"]["mean"] <= summary["gap"]["ci_high"]
    assert (tmp_path / "a" / "density.svg").is_file() and (tmp_path / "a" / "density.png").is_file()


@pytest.mark.parametrize("case, message", [
    ("missing", "image not found"), ("unreadable", "image unreadable"), ("escape", "escapes the image root"),
    ("not_clip", "is not a CLIP-family model"), ("bad_record", "record 0: neither"),
])
def test_pairs_errors_are_one_line_exit_2(case, message, tiny_clip_dir, tmp_path, capsys):
    """In-process through evalsuite.cli.main (same parser and error handling, no 5 s interpreter start)."""
    from evalsuite.cli import main

    root = tmp_path / "root"
    root.mkdir()
    (root / "bad.png").write_text("not an image")
    rec = {"image": {"missing": "nope.png", "unreadable": "bad.png", "escape": "../../etc/passwd"}.get(case, "bad.png"),
           "chosen": "a cube", "rejected": "a ball"}
    if case == "bad_record":
        rec = {"image": "bad.png", "answer": "x"}
    clip = tiny_clip_dir
    if case == "not_clip":
        clip = tmp_path / "llava"
        clip.mkdir()
        (clip / "config.json").write_text(json.dumps({"model_type": "llava"}))
    (tmp_path / "p.json").write_text(json.dumps([rec]))
    rc = main(["relevance", "pairs", "--pairs", str(tmp_path / "p.json"), "--image-root", str(root),
               "--clip", str(clip), "--output", str(tmp_path / "out")])
    stderr = capsys.readouterr().err
    assert rc == 2
    err = [line for line in stderr.splitlines() if line.startswith("evalsuite: error:")]
    assert len(err) == 1 and message in err[0], stderr
    if case in ("missing", "unreadable"):
        assert rec["image"] in err[0]
    assert not (tmp_path / "out" / "summary.json").exists()


@pytest.mark.slow
def test_run_caption_then_relevance(tiny_vlm_dir, tiny_clip_dir, world_dir, tmp_path):
    out = tmp_path / "run"
    r = cli_inprocess("run", "--ckpt", str(tiny_vlm_dir), "--tasks", "caption,relevance", "--clip",
                      str(tiny_clip_dir), "--data-root", str(world_dir), "--limit", "3", "--max-new-tokens", "8",
                      "--device", "cpu", "--output", str(out), "--store", str(tmp_path / "store"))
    assert r.returncode == 0, r.stderr[-3000:]
    caption = [json.loads(x) for x in (out / "caption" / "samples.jsonl").read_text().splitlines()]
    rel = [json.loads(x) for x in (out / "relevance" / "samples.jsonl").read_text().splitlines()]
    assert [s["answer"] for s in rel] == [s["answer"] for s in caption]   # the caption answers, not new ones
    summary = json.loads((out / "summary.json").read_text())
    metrics = {m["metric"]: m["value"] for m in summary["relevance"]["metrics"]}
    assert metrics["relevance_mean"] == pytest.approx(np.mean([s["relevance"] for s in rel]))
    assert summary["relevance"]["config"]["source"]["task"] == "caption"
