"""Commands that write into a folder never write over what they did not write (docs/reliability.md,
"Output folders"): `tiny-ckpt --out` takes only a new or empty folder (as `world build --out`); `pope build
--out` and `relevance pairs --output` replace only their own earlier files. Each refusal is one line, exit 2,
before any work."""
from __future__ import annotations

import json

from tests.conftest import cli_inprocess, run_cli


def _one_line_refusal(res, *needles) -> None:
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr
    for n in needles:
        assert n in res.stderr, res.stderr


def test_tiny_ckpt_refuses_a_non_empty_out(tmp_path):
    out = tmp_path / "ckpt"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"the user's weights")
    res = run_cli("tiny-ckpt", "--out", str(out))
    _one_line_refusal(res, f"--out {out}: exists and is not empty")
    assert (out / "model.safetensors").read_bytes() == b"the user's weights"
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]
    res = run_cli("tiny-ckpt", "--kind", "clip", "--out", str(out))
    _one_line_refusal(res, "exists and is not empty")
    (tmp_path / "file").write_text("x")
    _one_line_refusal(run_cli("tiny-ckpt", "--out", str(tmp_path / "file")), "is not a directory")


def test_tiny_ckpt_writes_into_an_empty_out(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    res = cli_inprocess("tiny-ckpt", "--kind", "clip", "--out", str(out))  # the refusals above: real processes
    assert res.returncode == 0, res.stderr[-2000:]
    assert (out / "model.safetensors").is_file()


def test_pope_build_replaces_its_own_files_only(golden_dir, tmp_path):
    inst = golden_dir / "chair" / "coco_val2014_80" / "instances.json"
    out = tmp_path / "p"

    def build():
        return run_cli("pope", "build", "--instances", str(inst), "--split", "val2014", "--out", str(out),
                       "--images", "10")

    assert build().returncode == 0
    first = (out / "pope_val2014_random.json").read_text()
    again = build()  # an earlier `pope build` output is ours: replaced, same content
    assert again.returncode == 0, again.stderr
    assert (out / "pope_val2014_random.json").read_text() == first
    (out / "pope_val2014_popular.json").write_text(json.dumps({"notes": "mine"}))
    _one_line_refusal(build(), "pope_val2014_popular.json there was not written by evalsuite")
    assert json.loads((out / "pope_val2014_popular.json").read_text()) == {"notes": "mine"}
    (out / "pope_val2014_popular.json").unlink()
    (out / "pope_val2014_adversarial.parquet").write_bytes(b"PAR1 not ours")
    _one_line_refusal(build(), "pope_val2014_adversarial.parquet there was not written")


def test_relevance_pairs_refuses_foreign_files_before_the_scorer_loads(tmp_path):
    pairs = tmp_path / "pairs.json"
    pairs.write_text(json.dumps([{"image": "a.png", "prompt": "q", "chosen": "a dog .", "rejected": "a cat ."}]))
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps({"my": "notes"}))
    # --clip names no checkpoint: the refusal comes before the scorer would fail to load it
    res = run_cli("relevance", "pairs", "--pairs", str(pairs), "--image-root", str(tmp_path),
                  "--clip", str(tmp_path / "no-clip"), "--output", str(out))
    _one_line_refusal(res, "summary.json there was not written by evalsuite")
    assert json.loads((out / "summary.json").read_text()) == {"my": "notes"}
    (out / "summary.json").unlink()
    (out / "pair_scores.jsonl").write_text("mine\n")
    res = run_cli("relevance", "pairs", "--pairs", str(pairs), "--image-root", str(tmp_path),
                  "--clip", str(tmp_path / "no-clip"), "--output", str(out))
    _one_line_refusal(res, "pair_scores.jsonl there was not written by evalsuite")
