"""Image fields are checked when training / CSR data is read, before any model loads (issue 37 item 5):
a wrong type, an empty string or a control character is one line naming the file, row and field; an
explicit null is a text-only row, counted in the data summary."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from evalsuite.errors import UserError

BAD = [(123, "must be an image path string, got int"), ("", "is an empty string (null marks a text-only row)"),
       ("a\x00b.png", "holds a control character ('\\x00')"), ("a\x1bb.png", "holds a control character ('\\x1b')"),
       ([1], "must be an image path string, got list")]


def _pairs(tmp_path, image):
    p = tmp_path / "pairs.json"
    p.write_text(json.dumps([{"image": "ok.png", "prompt": "q", "chosen": "a", "rejected": "b"},
                             {"image": image, "prompt": "q", "chosen": "a", "rejected": "b"}]))
    return p


@pytest.mark.parametrize("image,why", BAD)
def test_bad_image_field_of_a_pair_is_one_line(tmp_path, image, why):
    from training.data import read_examples

    p = _pairs(tmp_path, image)
    with pytest.raises(UserError) as e:
        read_examples("plain_dpo", p, str(tmp_path))
    assert str(e.value).startswith(f"{p}[1]: field 'image' {why}") and "\n" not in str(e.value)


@pytest.mark.parametrize("image,why", BAD)
def test_bad_image_field_of_an_sft_or_csr_pair_row(tmp_path, image, why):
    from training.data import read_examples

    human = {"from": "human", "value": "<image>\nq"}
    row = {"image": image, "conversations": [human, {"from": "gpt", "value": "a"}],
           "rejected_conversations": [human, {"from": "gpt", "value": "b"}]}
    p = tmp_path / "rows.json"
    p.write_text(json.dumps([row]))
    for name in ("vlquery_json", "csr_pairs"):
        with pytest.raises(UserError, match=rf"^{p}\[0\]: field 'image' "):
            read_examples(name, p, str(tmp_path))


@pytest.mark.parametrize("image,why", BAD)
def test_bad_image_field_of_a_csr_prompt(tmp_path, image, why):
    from training.csr.loop import load_prompts

    p = tmp_path / "prompts.jsonl"
    p.write_text(json.dumps({"id": 1, "image": image, "question": "q"}) + "\n")
    with pytest.raises(UserError) as e:
        load_prompts(p)
    assert str(e.value).startswith(f"{p}: record 0: field 'image' {why}")


def test_null_image_is_a_text_only_row_counted_in_the_summary(tmp_path):
    from PIL import Image

    from training.data import load_examples

    Image.new("RGB", (8, 8)).save(tmp_path / "ok.png")
    p = _pairs(tmp_path, None)
    cfg = SimpleNamespace(resolved_dataset="plain_dpo", data_path=str(p), image_root=str(tmp_path), score_margin=-1.0,
                          skip_missing_images=False, dataset_num_proc=1, eval_split=0.0, method="dpo",
                          sft_split="vlrlhf", data_ratio=1.0)
    train, _, info = load_examples(cfg)
    assert info["text_only"] == 1 and info["missing_images"] == 0 and len(train) == 2
