"""`evalsuite chair` on large inputs: memory does not grow with the number of captions, one huge caption
is one line (exit 2) without being read whole, NLTK's regex time guard never reaches the user as a
traceback, and --output never overwrites files the command did not write
(issue 27; probes H26-H29 and X2 of the second reliability findings)."""
from __future__ import annotations

import json
import math
import time
import tracemalloc

import pytest

from evalsuite.cli import main as cli_main

CAPTIONS = ["A man riding a horse on a beach.", "Two dogs, a cat and a couch in a room.",
            "The man's bike is next to a bus.", "\"A kite\" flies over people, cars and a truck."]


def _write(path, n):
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"image_id": 1 + i % 3, "caption": CAPTIONS[i % len(CAPTIONS)]}) + "\n" for i in range(n))
    return path


@pytest.fixture
def gt(tmp_path):
    path = tmp_path / "gt.json"
    path.write_text(json.dumps({"1": ["dog", "person"], "2": ["horse"], "3": []}))
    return path


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("evalsuite: error: ")
    return err[0]


def _peak(argv) -> int:
    tracemalloc.start()
    try:
        assert cli_main(argv) == 0
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_per_caption(tmp_path, gt, punkt_dir, capsys):
    """500 vs 5,000 captions: the peak of Python-tracked memory grows by under 200 bytes a caption
    (the per-caption counts are 24 bytes and the image ids 8; the old reader and records took ~10 KB).
    The first run also pays the one-off loads (punkt, vocabulary), so both are measured after it."""
    small, big = _write(tmp_path / "s.jsonl", 500), _write(tmp_path / "b.jsonl", 5000)
    common = ["--gt", str(gt), "--nltk-data", str(punkt_dir), "--n-boot", "0"]
    assert cli_main(["chair", "--captions", str(small), "--output", str(tmp_path / "o0"), *common]) == 0
    p_small = _peak(["chair", "--captions", str(small), "--output", str(tmp_path / "o1"), *common])
    p_big = _peak(["chair", "--captions", str(big), "--output", str(tmp_path / "o2"), *common])
    assert (p_big - p_small) / 4500 < 200, (p_small, p_big)
    s = json.loads((tmp_path / "o2" / "summary.json").read_text())
    rows = (tmp_path / "o2" / "per_caption.jsonl").read_text().splitlines()
    assert s["num_caps"] == len(rows) == 5000 and json.loads(rows[-1])["index"] == 4999
    assert s["n_boot"] == 0 and all(math.isnan(v) for v in s["ci"]["CHAIRs"])  # no resamples, no CI


def test_bootstrap_memory_is_bounded_and_values_are_the_plain_bootstraps():
    """CIs of 100,000 captions with 500 replicates: the one-shot form held 400 MB of draws (8 bytes per
    caption and replicate); drawn a few replicates at a time the peak stays under 120 MB. Values equal
    `stats.bootstrap_ci` on a small set."""
    import numpy as np

    from evalsuite.metrics import chair
    from evalsuite.metrics.stats import bootstrap_ci, safe_ratio

    rng = np.random.default_rng(0)
    n = 100_000
    mentions = rng.integers(0, 4, n)
    halluc = (rng.random(n) * (mentions + 1)).astype(int)
    counts = chair.ChairCounts()
    for name, col in (("CHAIRs", halluc > 0), ("hallucinated", halluc), ("mentions", mentions),
                      ("recalled", np.ones(n)), ("gt", np.full(n, 2)), ("tokens", np.full(n, 9))):
        counts.cols[name].frombytes(np.asarray(col, dtype=np.int32).tobytes())
    tracemalloc.start()
    try:
        cis = counts.cis(n_boot=500, seed=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 120 << 20, peak
    assert all(lo <= hi for lo, hi in cis.values())

    small = [chair.score_caption([("cat", "cat", 0)] * (i % 3), {"dog"} if i % 4 else {"cat"}, 4) for i in range(300)]
    rows = np.asarray([(len(r["hallucinated"]), len(r["mentions"])) for r in small], dtype=float)
    want = bootstrap_ci(rows, lambda x: safe_ratio(x[:, 0].sum(), x[:, 1].sum()), n_boot=500, seed=4)
    assert chair.chair_cis(small, n_boot=500, seed=4)["CHAIRi"] == list(want)


@pytest.mark.parametrize("kind", ["words", "no_spaces"])
def test_a_50_mb_caption_is_one_line_naming_it(tmp_path, gt, punkt_dir, capsys, kind):
    """H28/H29: a 50 MB caption (real words, or one 50 MB "word") is refused at its line without being
    read whole: exit 2, one line naming FILE:LINE and the limit, in well under a second and a few MB."""
    path = tmp_path / "big.jsonl"
    text = ("a dog on a couch " * 3_000_000) if kind == "words" else "a" * 50_000_000
    path.write_text(json.dumps({"image_id": 1, "caption": "a dog"}) + "\n"
                    + json.dumps({"image_id": 2, "caption": text}) + "\n")
    del text
    t0 = time.perf_counter()
    tracemalloc.start()
    try:
        rc = cli_main(["chair", "--captions", str(path), "--gt", str(gt), "--nltk-data", str(punkt_dir),
                       "--output", str(tmp_path / "o")])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rc == 2
    assert f"{path}:2: record longer than 1,048,576 bytes" in _error_line(capsys)
    assert peak < 20 << 20 and time.perf_counter() - t0 < 10
    assert not (tmp_path / "o").exists()


def test_nltks_regex_time_guard_is_one_line(tmp_path, gt, punkt_dir, capsys, monkeypatch):
    """NLTK 3.10 runs its tokenizer regexes under a time limit that raises TimeoutError: that is one
    line naming the caption's line, exit 2, and no half-written output."""
    from evalsuite.metrics import chair_tokenize

    def too_slow(self, text):
        if "bus" in text:
            raise TimeoutError("regular-expression match exceeded its 5.0s time limit")
        return text.split()

    monkeypatch.setattr(chair_tokenize.Tokenizer, "__call__", too_slow)
    caps = _write(tmp_path / "c.jsonl", 4)  # line 3 mentions a bus
    rc = cli_main(["chair", "--captions", str(caps), "--gt", str(gt), "--nltk-data", str(punkt_dir),
                   "--output", str(tmp_path / "o")])
    assert rc == 2
    line = _error_line(capsys)
    assert f"{caps}:3: NLTK's tokenizer gave up on this caption" in line
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_output_holding_a_users_summary_is_refused(tmp_path, gt, punkt_dir, capsys):
    """X2: --output a folder with the user's own summary.json: exit 2 before scoring, the file untouched;
    an earlier `evalsuite chair` output in it is replaced."""
    caps = _write(tmp_path / "c.jsonl", 4)
    out = tmp_path / "precious"
    out.mkdir()
    (out / "summary.json").write_text("mine\n")
    args = ["chair", "--captions", str(caps), "--gt", str(gt), "--nltk-data", str(punkt_dir), "--n-boot", "5"]
    assert cli_main(args + ["--output", str(out)]) == 2
    assert "--output " + str(out) + ": holds summary.json that `evalsuite chair` did not write" in _error_line(capsys)
    assert (out / "summary.json").read_text() == "mine\n" and not (out / "per_caption.jsonl").exists()
    own = tmp_path / "own"
    assert cli_main(args + ["--output", str(own)]) == 0
    assert cli_main(args + ["--output", str(own)]) == 0
    assert json.loads((own / "summary.json").read_text())["num_caps"] == 4
    assert sorted(p.name for p in own.iterdir()) == ["per_caption.jsonl", "summary.json"]  # no temp file left


def test_reader_lines_bom_crlf_blank_and_non_utf8(tmp_path):
    """The streamed reader keeps the old reader's answers: a BOM, CRLF endings and blank lines are
    fine; a non-UTF-8 byte names its line and file offset; --n-boot 0 gives NaN CIs, not a traceback."""
    from evalsuite.errors import UserError
    from evalsuite.metrics.chair_io import read_captions

    path = tmp_path / "c.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"image_id": 1, "caption": "a"}\r\n\r\n  \n{"image_id": 2, "text": "b"}')
    assert read_captions(path) == [(1, "a"), (2, "b")]
    path.write_bytes(b'{"image_id": 1, "caption": "a"}\n{"image_id": 14, "caption": "a w\xffman"}\n')
    with pytest.raises(UserError, match=r"c\.jsonl:2: not UTF-8 text \(byte 0xff at offset 64\)"):
        read_captions(path)
    path.write_bytes(b"\n\n")
    with pytest.raises(UserError, match="no captions"):
        read_captions(path)


def test_n_boot_zero_and_negative(tmp_path, gt, punkt_dir, capsys):
    caps = _write(tmp_path / "c.jsonl", 4)
    args = ["chair", "--captions", str(caps), "--gt", str(gt), "--nltk-data", str(punkt_dir)]
    assert cli_main(args + ["--n-boot", "0", "--output", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    assert cli_main(args + ["--n-boot", "-1", "--output", str(tmp_path / "p")]) == 2
    assert "--n-boot: must be >= 0, got -1" in _error_line(capsys)
