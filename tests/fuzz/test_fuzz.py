"""Fuzz suite: seeded hostile variants of every user-facing input, each of which must end as a normal
return (exit 0) or one `UserError` line (exit 2), within 20 s and with the process' peak memory growing
by less than 2 GB over a kind's whole batch, leaving no file behind but the input itself.

Variants come from tests/fuzz/hostile.py. In CI: FUZZ_N (default 120) variants per kind x 10 kinds, in
process, calling the same readers the CLI calls. `make fuzz-soak` runs many more with a fresh seed
(FUZZ_SEED), and a few subprocess cases below check the real exit code under an address-space limit.
"""
from __future__ import annotations

import os
import random
import resource
import struct
import subprocess
import sys
import json
import time
from pathlib import Path

import pytest

from evalsuite.errors import UserError
from tests.conftest import REPO
from tests.fuzz import hostile

N = int(os.environ.get("FUZZ_N", "120"))
SEED = int(os.environ.get("FUZZ_SEED", "0"))
TIME_BOUND_S = 20.0
MEMORY_BOUND_KB = 2 * 1024 * 1024


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _fuzz(kind: str, tmp_path: Path, consume, name: str = "input") -> None:
    """Feed N variants of `kind` to `consume(path)`; fail listing every variant that broke the contract."""
    gen = hostile.GENERATORS[kind]
    work = tmp_path / "work"
    work.mkdir()
    path = work / name
    failures = []
    start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcomes = {"ok": 0, "refused": 0}
    for i in range(N):
        rng = random.Random(f"{SEED}:{kind}:{i}")
        data = gen(rng)
        path.write_bytes(data)
        before = _files(tmp_path)
        t = time.monotonic()
        try:
            consume(path)
            outcomes["ok"] += 1
        except UserError as e:
            msg = str(e)
            outcomes["refused"] += 1
            if "\n" in msg or len(msg) > 2000:
                failures.append((i, f"not one short line ({len(msg)} chars): {msg[:200]!r}"))
        except Exception as e:   # noqa: BLE001 - a traceback where the contract promises one line
            failures.append((i, f"{type(e).__name__}: {str(e)[:200]}"))
        took = time.monotonic() - t
        if took > TIME_BOUND_S:
            failures.append((i, f"took {took:.1f} s"))
        left = _files(tmp_path) - before
        if left:
            failures.append((i, f"left files {sorted(left)[:3]}"))
    print(f"fuzz {kind} seed {SEED}: {N} variants, {outcomes['ok']} accepted, {outcomes['refused']} refused "
          "in one line")
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start_rss
    assert grew < MEMORY_BOUND_KB, f"{kind}: peak RSS grew by {grew / 1024:.0f} MB"
    assert not failures, f"{kind} seed {SEED}: {len(failures)} of {N} variants broke the contract: {failures[:5]}"
    assert outcomes["ok"] + outcomes["refused"] == N


def test_fuzz_eval_yaml(tmp_path):
    """H3/H4/H6 family: eval presets."""
    from evalsuite.run_config import load_eval_config

    _fuzz("eval_yaml", tmp_path, lambda p: load_eval_config(["--config", str(p), "--ckpt", "x"]), "e.yaml")


def test_fuzz_train_yaml(tmp_path):
    """H5 family: train presets (validated exactly as train.py --dry-run does)."""
    from training.train import load

    _fuzz("train_yaml", tmp_path, lambda p: load(None, str(p), [], dry_run=True), "t.yaml")


def _tiny_safetensors(path: Path) -> None:
    raw = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 8)


def test_fuzz_config_json(tmp_path):
    """H10 family: a checkpoint's config.json."""
    from evalsuite.models.vlm import _check_dir

    ck = tmp_path / "ck"
    ck.mkdir()
    _tiny_safetensors(ck / "model.safetensors")
    (ck / "config.json").write_text("{}")

    def consume(p):
        (ck / "config.json").write_bytes(p.read_bytes())
        _check_dir(ck)

    _fuzz("config_json", tmp_path, consume, "config.json")


def test_fuzz_safetensors_header(tmp_path):
    """H7/H8/H9 family: safetensors headers (validated before any library opens the file)."""
    from evalsuite.safeio import check_safetensors

    _fuzz("safetensors", tmp_path, check_safetensors, "model.safetensors")


def test_fuzz_captions_and_pairs(tmp_path):
    """D10 family: CHAIR caption files and relevance pair files."""
    from evalsuite.metrics.chair_io import read_captions
    from evalsuite.metrics.relevance import read_pairs

    (tmp_path / "c").mkdir()
    (tmp_path / "p").mkdir()
    _fuzz("captions", tmp_path / "c", lambda p: list(read_captions(p)), "captions.jsonl")
    _fuzz("pairs", tmp_path / "p", read_pairs, "pairs.json")


def _image_ok(value) -> None:
    """What a reader may hand on: None (a text-only row) or a non-empty path without control characters."""
    if value is not None:
        assert isinstance(value, str) and value.strip(), repr(value)
        assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value), repr(value)


def test_fuzz_training_data_image_fields(tmp_path):
    """Issue 37 item 5: the training readers (plain_dpo, vlquery_json, csr_pairs) and the CSR prompt reader
    check image fields when the data is read: a variant is accepted with only valid images, or refused in
    one line."""
    from training.csr.loop import load_prompts
    from training.data import read_examples

    def consume(path):
        for name in ("plain_dpo", "vlquery_json", "csr_pairs"):
            examples, _ = read_examples(name, path, str(tmp_path))
            for ex in examples:
                _image_ok(ex["image"])
        for rec in load_prompts(path):
            assert rec["image"] is not None
            _image_ok(rec["image"])

    _fuzz("training_rows", tmp_path, consume, "rows.json")


def test_fuzz_resume_cache(tmp_path):
    """S5/S6 family: a resume cache is never fatal (bad lines are skipped with a warning)."""
    from evalsuite.models.cache import ResponseCache

    root = tmp_path / "cache"
    (root / "h").mkdir(parents=True)
    (root / "h" / "caption.rank0.jsonl").write_text("")

    def consume(p):
        (root / "h" / "caption.rank0.jsonl").write_bytes(p.read_bytes())
        ResponseCache(root, "h", "caption")

    _fuzz("resume_cache", tmp_path, consume, "cache.jsonl")


def test_fuzz_store_footer(tmp_path):
    """S8 / D13 family: a metrics file's footer metadata; reading is one line or fine, and the reuse
    check never raises."""
    import pyarrow.parquet as pq

    from evalsuite.store import Store
    from evalsuite.store.store import read_file
    from evalsuite.types import MetricValue, TaskResult

    store = Store(tmp_path / "st")
    s = {"key": "val:1", "image_id": 1, "image": "i.png", "prompt": "p", "answer": "a"}
    rid = store.write_run({"ckpt_hash": "h"}, [TaskResult("caption", "1", [MetricValue("m", 1.0, True, n=1)], samples=[s])])
    path = store.metrics_dir / f"{rid}.parquet"
    table = pq.read_table(path)

    def consume(p):
        pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"evalsuite.run": p.read_bytes()}), path)
        store.has_result("h", "k")
        read_file(path)

    _fuzz("store_footer", tmp_path, consume, "footer.json")


@pytest.fixture(scope="module")
def processor(tiny_vlm_dir):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_vlm_dir, local_files_only=True)


def test_fuzz_chat_template(tmp_path, processor, monkeypatch):
    """H12-H16 family: chat template files (the deadline shortened so the suite stays fast)."""
    from evalsuite.models import template
    from evalsuite.models.inputs import InputConfig, ModelInputs

    monkeypatch.setattr(template, "TIME_LIMIT", 0.5)
    _fuzz("chat_template", tmp_path, lambda p: ModelInputs(processor, InputConfig(chat_template=str(p))).prompt("q"),
          "t.jinja")


# ---------------------------------------------------------------------------------- subprocesses
def _limited(argv: list[str], as_bytes: int) -> subprocess.CompletedProcess:
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))

    return subprocess.run(argv, capture_output=True, text=True, timeout=60, preexec_fn=limit, cwd=REPO,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.parametrize("i", range(3))
def test_fuzz_cli_exit_codes_under_a_memory_limit(i, tmp_path):
    """The real entry point on hostile presets (an alias bomb, deep nesting, a mutated preset) under a
    2 GB address-space limit: exit 0 or 2, at most one error line, within 20 s."""
    from tests.reliability.helpers import error_lines

    rng = random.Random(f"{SEED}:cli:{i}")
    text = [f"tasks: [caption, {hostile.alias_bomb(rng)}]\n".encode(),
            ("label: " + hostile.deep(rng) + "\n").encode(), hostile.eval_yaml(rng)][i]
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(text)
    t = time.monotonic()
    res = _limited([sys.executable, "-m", "evalsuite.cli", "run", "--config", str(cfg), "--ckpt", str(tmp_path),
                    "--dry-run"], 2 << 30)
    assert time.monotonic() - t < TIME_BOUND_S + 10
    assert "Traceback" not in res.stderr and res.returncode in (0, 2), res.stderr[-2000:]
    assert len(error_lines(res.stderr)) <= 1, res.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]
