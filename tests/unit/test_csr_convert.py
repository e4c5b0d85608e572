"""`evalsuite csr-convert` on records shaped like CSR's released files (docs/csr-fidelity.md, "Released data").

Prompt file rows (CSR-Prompt-Dataset-12k.json): {"id": "000000442786", "image": "000000442786.jpg",
"input": "What do you see happening in this image?\\n<image>"} - the image name without the COCO prefix,
"<image>" first in about half the rows and last in the others. Preference rows (construct.py): the human
turn is the whole Vicuna-templated prompt and the image path includes the folder.
"""
from __future__ import annotations

import json

import pytest

from evalsuite.convert.csr import convert_pairs, convert_prompts
from evalsuite.errors import UserError
from tests.conftest import run_cli

SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
          "detailed, and polite answers to the user's questions.")
PROMPT_ROWS = [
    {"id": "000000442786", "image": "000000442786.jpg", "input": "What do you see happening in this image?\n<image>"},
    {"id": "000000267779", "image": "000000267779.jpg", "input": "<image>\nAnalyze the image in a comprehensive and detailed manner."},
]


def _pair_row(qid: str, question: str) -> dict:
    human = f"{SYSTEM} USER: <image>\n{question} ASSISTANT:"
    return {"id": qid, "image": f"./data/images/train2014/COCO_train2014_{qid}.jpg",
            "conversations": [{"from": "human", "value": human}, {"from": "gpt", "value": "A man rides a horse."}],
            "rejected_conversations": [{"from": "human", "value": human},
                                       {"from": "gpt", "value": "A man rides a horse next to a dog."}]}


def test_prompt_file_rows():
    """The COCO_train2014_ prefix is added (sample.py opens images_dir/COCO_train2014_ + image) and
    "<image>" is removed from either end, as sample.py does before templating."""
    out = convert_prompts(PROMPT_ROWS, "p.json")
    assert out == [
        {"id": "000000442786", "image": "COCO_train2014_000000442786.jpg", "question": "What do you see happening in this image?"},
        {"id": "000000267779", "image": "COCO_train2014_000000267779.jpg",
         "question": "Analyze the image in a comprehensive and detailed manner."}]
    with pytest.raises(UserError, match=r"p.json\[1\]: duplicate id"):
        convert_prompts([PROMPT_ROWS[0], PROMPT_ROWS[0]], "p.json")
    with pytest.raises(UserError, match=r"p.json\[0\]: field 'input'"):
        convert_prompts([{"id": "1", "image": "x.jpg"}], "p.json")


def test_converted_prompts_load_in_the_loop(tmp_path):
    from training.csr.loop import load_prompts

    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in convert_prompts(PROMPT_ROWS, "p.json")))
    assert [r["question"] for r in load_prompts(path)] == ["What do you see happening in this image?",
                                                           "Analyze the image in a comprehensive and detailed manner."]


def test_released_pairs_become_csr_pairs(tmp_path):
    """Fed as is, the templated human turn would be templated again and the image folder doubled: the
    reader refuses it. Converted: the bare question and the file name under the image root."""
    from training.data import read_examples

    rows = [_pair_row("000000442786", "Describe the following image.")]
    (tmp_path / "raw.json").write_text(json.dumps(rows))
    with pytest.raises(UserError, match="csr-convert pairs"):
        read_examples("csr_pairs", tmp_path / "raw.json", image_root=str(tmp_path))
    (rec,) = convert_pairs(rows, "raw.json")
    assert rec["image"] == "COCO_train2014_000000442786.jpg"
    assert rec["conversations"][0] == {"from": "human", "value": "<image>\nDescribe the following image."}
    assert rec["rejected_conversations"][1]["value"] == "A man rides a horse next to a dog."
    assert convert_pairs(rows, "raw.json", image_dir="./data/images")[0]["image"] == "train2014/COCO_train2014_000000442786.jpg"
    with pytest.raises(UserError, match="not under --image-dir"):
        convert_pairs(rows, "raw.json", image_dir="/elsewhere")
    (tmp_path / "pairs.json").write_text(json.dumps([rec]))
    (ex,), _ = read_examples("csr_pairs", tmp_path / "pairs.json", image_root=str(tmp_path))
    assert (ex["prompt"], ex["chosen"]) == ("Describe the following image.", "A man rides a horse.")
    assert ex["image"] == str(tmp_path / "COCO_train2014_000000442786.jpg")


def test_cli(tmp_path):
    """The command writes the file and names its count; a missing image under --image-root is one line, exit 2."""
    src = tmp_path / "CSR-Prompt-Dataset-12k.json"
    src.write_text(json.dumps(PROMPT_ROWS))
    images = tmp_path / "train2014"
    images.mkdir()
    (images / "COCO_train2014_000000442786.jpg").write_bytes(b"x")
    out = tmp_path / "prompts.jsonl"
    bad = run_cli("csr-convert", "prompts", str(src), "--out", str(out), "--image-root", str(images))
    assert bad.returncode == 2 and not out.exists()
    assert bad.stderr.strip().splitlines()[-1].startswith("evalsuite: error: record '000000267779'")
    (images / "COCO_train2014_000000267779.jpg").write_bytes(b"x")
    ok = run_cli("csr-convert", "prompts", str(src), "--out", str(out), "--image-root", str(images))
    assert ok.returncode == 0 and ok.stdout.strip() == f"{out}: 2 prompts"
    assert [json.loads(x)["image"] for x in out.read_text().splitlines()] == [
        "COCO_train2014_000000442786.jpg", "COCO_train2014_000000267779.jpg"]


def test_cli_image_options_apply_to_their_kind_only(tmp_path):
    """--image-prefix shapes prompt files and --image-dir pair files; each given with the other kind would be
    accepted and ignored, so it is one error line naming the option (exit 2, nothing written)."""
    prompts, pairs = tmp_path / "p.json", tmp_path / "pairs.json"
    prompts.write_text(json.dumps(PROMPT_ROWS))
    pairs.write_text(json.dumps([_pair_row("000000442786", "Describe the image.")]))
    out = tmp_path / "out.json"
    for kind, src, flag, value in (("pairs", pairs, "--image-prefix", "COCO_val2014_"),
                                   ("prompts", prompts, "--image-dir", "./data/images")):
        res = run_cli("csr-convert", kind, str(src), "--out", str(out), flag, value)
        assert res.returncode == 2 and not out.exists()
        other = "prompts" if kind == "pairs" else "pairs"
        assert res.stderr.strip().splitlines() == [f"evalsuite: error: {flag}: only applies to "
                                                   f"`csr-convert {other}`, not {kind}"]
    ok = run_cli("csr-convert", "prompts", str(prompts), "--out", str(out), "--image-prefix", "COCO_val2014_")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(out.read_text().splitlines()[0])["image"] == "COCO_val2014_000000442786.jpg"
    ok = run_cli("csr-convert", "pairs", str(pairs), "--out", str(out), "--image-dir", "./data/images")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(out.read_text())[0]["image"] == "train2014/COCO_train2014_000000442786.jpg"
