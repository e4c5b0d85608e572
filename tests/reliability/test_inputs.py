"""Non-UTF-8 and malformed record files (user data comes from many tools and encodings): `evalsuite chair --captions`,
`evalsuite relevance pairs --pairs`, `train.py --data_path` and the CSR prompt file all read through
`evalsuite.files.read_json_records`, which names the file and the line of the bad byte."""
from __future__ import annotations

import json

import pytest

from evalsuite.errors import UserError
from evalsuite.files import read_json_records
from tests.conftest import REPO, run_cli
from tests.reliability.helpers import one_error, snapshot

# line 1 is 35 bytes with its newline; the 0xff is byte 32 of line 2, so at offset 35 + 32 = 67
BAD = b'{"image_id": 1, "caption": "fine"}\n{"image_id": 14, "caption": "a w\xffman"}\n'


def test_read_json_records_errors_name_file_and_line(tmp_path):
    f = tmp_path / "c.jsonl"
    f.write_bytes(BAD)
    with pytest.raises(UserError, match=r"c\.jsonl:2: not UTF-8 text \(byte 0xff at offset 67\)"):
        read_json_records(f, "captions")
    f.write_text('{"a": 1}\n\n{"a": \n')
    with pytest.raises(UserError, match=r"c\.jsonl:3: not valid JSON \(Expecting value, column 7\)"):
        read_json_records(f)
    f.write_text('[\n {"a": 1},\n {"a": }\n]')
    with pytest.raises(UserError, match=r"c\.jsonl:3: not valid JSON"):
        read_json_records(f)
    f.write_text('{"data": [{"a": 1}]}')
    with pytest.raises(UserError, match="expected a JSON list of pairs"):
        read_json_records(f, "pairs", jsonl=False)
    assert read_json_records(f, jsonl=False, unwrap="data") == [(f"{f}[0]", {"a": 1})]
    f.write_bytes(b"\xef\xbb\xbf" + b'[{"a": 1}, 2]')        # a UTF-8 BOM is fine
    assert [v for _, v in read_json_records(f)] == [{"a": 1}, 2]
    f.write_text('{"a": 1}\n{"b": 2}\n')
    assert read_json_records(f) == [(f"{f}:1", {"a": 1}), (f"{f}:2", {"b": 2})]
    with pytest.raises(UserError, match="nope.json: prompt file not found"):
        read_json_records(tmp_path / "nope.json", "prompt")


def test_chair_non_utf8_captions_is_one_line(tmp_path, world_dir):
    caps = tmp_path / "c.jsonl"
    caps.write_bytes(BAD)
    before = snapshot(tmp_path)
    res = run_cli("chair", "--captions", str(caps), "--gt", str(world_dir), "--output", str(tmp_path / "o"))
    assert one_error(res) == f"evalsuite: error: {caps}:2: not UTF-8 text (byte 0xff at offset 67); save the file as UTF-8"
    assert snapshot(tmp_path) == before


def test_relevance_pairs_non_utf8_is_one_line(tmp_path, world_dir):
    pairs = tmp_path / "p.json"
    pairs.write_bytes(json.dumps([{"image": "images/train/x.png", "chosen": "a cat", "rejected": "a dog"}])
                      .encode().replace(b"a cat", b"a c\xe4t"))
    before = snapshot(tmp_path)
    res = run_cli("relevance", "pairs", "--pairs", str(pairs), "--clip", str(tmp_path / "noclip"),
                  "--image-root", str(world_dir), "--output", str(tmp_path / "o"))
    assert one_error(res).startswith(f"evalsuite: error: {pairs}:1: not UTF-8 text (byte 0xe4 at offset ")
    assert snapshot(tmp_path) == before


def test_train_non_utf8_data_is_one_line(tiny_vlm_dir, world_dir, tmp_path):
    from tests.conftest import train_inprocess

    data = tmp_path / "d.json"
    data.write_bytes(b'[\n{"image": "images/train/x.png", "prompt": "q", "chosen": "a", "rejected": "b\xff"}\n]')
    res = train_inprocess("--config", str(REPO / "configs" / "train" / "tiny_cpu.yaml"),
                          "--model_name_or_path", str(tiny_vlm_dir), "--image_root", str(world_dir),
                          "--data_path", str(data), "--output_dir", str(tmp_path / "o"))
    line = one_error(res, prefix="train.py: error: ")
    assert line.startswith(f"train.py: error: {data}:2: not UTF-8 text (byte 0xff at offset ")
    assert "FutureWarning" not in res.stderr                   # the preset uses activation_checkpointing
    assert not (tmp_path / "o").exists()


def test_csr_prompts_non_utf8(tmp_path):
    from training.csr.loop import load_prompts

    p = tmp_path / "prompts.jsonl"
    p.write_bytes(b'{"id": 1, "image": "a.png", "question": "Wh\xe4t?"}\n')
    with pytest.raises(UserError, match=r"prompts\.jsonl:1: not UTF-8 text \(byte 0xe4"):
        load_prompts(p)
