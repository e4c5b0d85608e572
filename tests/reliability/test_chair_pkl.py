"""`evalsuite chair-gt import` on malformed pickles: success or one UserError line,
never another exception, and bounded memory (memo indexes and file size are checked before unpickling),
because a reference file downloaded from elsewhere may be truncated, hostile or simply not CHAIR's pickle.
"""
from __future__ import annotations

import random
import resource
import struct
import sys

import pytest

from evalsuite.errors import UserError
from evalsuite.metrics import chair_gt
from tests.conftest import run_cli
from tests.reliability.helpers import one_error, snapshot
from tests.unit.test_chair import _fake_chair_pickle


def _mutate(data: bytes, rng: random.Random) -> bytes:
    """1-4 random edits: overwrite / delete / insert a byte, or splice in a large length or memo index."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        i, r = rng.randrange(len(b)), rng.random()
        if r < 0.45:
            b[i] = rng.randrange(256)
        elif r < 0.6:
            del b[i]
        elif r < 0.75:
            b.insert(i, rng.randrange(256))
        else:
            b[i:i] = rng.choice([b"r\xff\xff\xff\x7f", b"q\xfe", b"X\xff\xff\xff\x7f", b"\x8a\xff", b"\x95" + b"\xff" * 8,
                                 b"L" + b"9" * 5000 + b"L\n", b"j\xff\xff\xff\x7f", b"\x8d" + b"\xff" * 8])
    return bytes(b)


def test_fuzzed_pickles_are_success_or_user_error(monkeypatch, tmp_path):
    """600 mutants (seed 0) of chair.pkl at protocols 0, 2 and 4; before the fix about a third escaped
    as ValueError / OverflowError / UnicodeDecodeError / MemoryError."""
    rng = random.Random(0)
    outcomes = {"ok": 0, "UserError": 0}
    f = tmp_path / "m.pkl"
    for protocol in (0, 2, 4):
        base = _fake_chair_pickle(monkeypatch, protocol)
        for _ in range(200):
            f.write_bytes(_mutate(base, rng))
            try:
                chair_gt.import_chair_pkl(f)
                outcomes["ok"] += 1
            except UserError as e:
                assert "\n" not in str(e) and str(e).startswith(str(f))
                outcomes["UserError"] += 1
    assert sum(outcomes.values()) == 600 and outcomes["UserError"] > 300, outcomes


def test_huge_memo_index_is_refused_before_allocating(tmp_path):
    """98 bytes: a valid-looking protocol-2 pickle whose LONG_BINPUT index 1937084564 would make the C
    unpickler size its memo table to ~2 x 1.9e9 pointers (31 GB). Run under a 1 GiB address-space
    limit: the import answers one line instead of MemoryError or the OOM killer."""
    body = (b"\x80\x02" b"}q\x00"                                   # PROTO 2, EMPTY_DICT, BINPUT 0
            b"X\x0f\x00\x00\x00imid_to_objects" b"q\x01"             # BINUNICODE, BINPUT 1
            b"}" b"r" + struct.pack("<I", 1937084564) + b"s")            # EMPTY_DICT, LONG_BINPUT 1937084564, SETITEM
    pad = 98 - len(body) - 7                                            # a BINUNICODE + POP to reach 98 bytes
    data = body + b"X" + struct.pack("<I", pad) + b"p" * pad + b"0."
    assert len(data) == 98
    pkl = tmp_path / "memo.pkl"
    pkl.write_bytes(data)
    with pytest.raises(UserError, match=r"memo\.pkl: cannot import this chair\.pkl \(UnpicklingError: LONG_BINPUT "
                                        r"memo index 1937084564 at byte \d+ is out of range"):
        chair_gt.import_chair_pkl(pkl)

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    import subprocess

    from tests.conftest import REPO

    res = subprocess.run([sys.executable, "-m", "evalsuite.cli", "chair-gt", "import", "--pkl", str(pkl),
                          "--normalizer", "pattern", "--out", str(tmp_path / "gt.json.gz")],
                         cwd=REPO, capture_output=True, text=True, timeout=120, preexec_fn=limit, check=False)
    assert "memo index 1937084564" in one_error(res)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memo.pkl"]


def test_big_int_and_oversized_pickles_are_one_line(tmp_path, monkeypatch):
    big = tmp_path / "bigint.pkl"
    big.write_bytes(b"L" + b"9" * 5000 + b"L\n.")        # a 5000-digit int: over Python's 4300-digit limit
    before = snapshot(tmp_path)
    res = run_cli("chair-gt", "import", "--pkl", str(big), "--normalizer", "pattern", "--out", str(tmp_path / "o.json"))
    assert one_error(res).startswith(f"evalsuite: error: {big}: cannot import this chair.pkl (ValueError: ")
    assert snapshot(tmp_path) == before
    monkeypatch.setattr(chair_gt, "MAX_PKL_BYTES", 1000)
    with pytest.raises(UserError, match=r"bigint\.pkl: 5004 bytes is larger than any chair\.pkl"):
        chair_gt.import_chair_pkl(big)
