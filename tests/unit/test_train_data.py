"""Dataset loaders on small local files: formats, image joins, malformed records, splits."""
import json

import pytest

from evalsuite.errors import UserError
from training.data import data_hash, drop_missing_images, read_examples, split_train_eval
from training.data.formats import select_pairs


def write(path, obj):
    path.write_text(json.dumps(obj))
    return path


@pytest.fixture
def root(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.png").write_bytes(b"png")
    return tmp_path


def test_plain_dpo_strips_image_token_and_joins_root(root):
    f = write(root / "d.json", [{"image": "a.png", "prompt": "<image>\nDescribe.", "chosen": "x", "rejected": "y"},
                                {"prompt": "Text only?", "chosen": "c", "rejected": "r"}])
    ex, files = read_examples("plain_dpo", f, image_root=str(root / "img"))
    assert ex[0]["image"] == str((root / "img" / "a.png").resolve())
    assert (ex[0]["prompt"], ex[0]["chosen"], ex[0]["rejected"]) == ("Describe.", "x", "y")
    assert ex[1]["image"] is None and files == [f]


def test_image_root_defaults_to_data_dir_and_refuses_traversal(root):
    f = write(root / "d.json", [{"image": "img/a.png", "prompt": "q", "chosen": "x", "rejected": "y"}])
    assert read_examples("plain_dpo", f)[0][0]["image"].endswith("img/a.png")
    bad = write(root / "bad.json", [{"image": "../../etc/passwd", "prompt": "q", "chosen": "x", "rejected": "y"}])
    with pytest.raises(UserError, match=r"bad.json\[0\] image path .* escapes"):
        read_examples("plain_dpo", bad, image_root=str(root / "img"))


def test_csr_pairs_and_vlquery(root):
    conv = [{"from": "human", "value": "<image>\nWhat is here?"}, {"from": "gpt", "value": "A cat."}]
    rej = [{"from": "human", "value": "<image>\nWhat is here?"}, {"from": "gpt", "value": "A dog."}]
    f = write(root / "p.json", [{"id": "1", "image": "img/a.png", "conversations": conv, "rejected_conversations": rej}])
    (ex,), _ = read_examples("csr_pairs", f)
    assert (ex["prompt"], ex["chosen"], ex["rejected"]) == ("What is here?", "A cat.", "A dog.")
    q = write(root / "q.json", [{"image": "img/a.png", "conversations": [
        {"from": "user", "value": "Hi <image>"}, {"from": "assistant", "value": "Hello"},
        {"from": "user", "value": "More?"}, {"from": "assistant", "value": "No"}]}])
    (ex,), _ = read_examples("vlquery_json", q)
    assert ex["messages"] == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                              {"role": "user", "content": "More?"}, {"role": "assistant", "content": "No"}]


@pytest.mark.parametrize("record, msg", [
    ({"prompt": "q", "chosen": "x"}, r"\[1\]: field 'rejected' must be a non-empty string"),
    ({"prompt": "q", "chosen": "", "rejected": "y"}, r"\[1\]: field 'chosen'"),
    ({"prompt": "q", "chosen": "x", "rejected": "y", "image": 5}, r"\[1\]: field 'image'"),
])
def test_malformed_record_names_file_and_index(root, record, msg):
    f = write(root / "m.json", [{"prompt": "q", "chosen": "x", "rejected": "y"}, record])
    with pytest.raises(UserError, match=msg):
        read_examples("plain_dpo", f)


def test_malformed_json_and_unknown_dataset(root):
    f = root / "broken.json"
    f.write_text('[{"prompt": "q",]')
    with pytest.raises(UserError, match=r"broken.json:1: not valid JSON"):
        read_examples("plain_dpo", f)
    with pytest.raises(UserError, match="unknown dataset 'nope'"):
        read_examples("nope", f)
    bad_role = write(root / "r.json", [{"conversations": [{"from": "gpt", "value": "a"}, {"from": "user", "value": "b"}]}])
    with pytest.raises(UserError, match=r"r.json\[0\]: conversations\[0\] role 'gpt'"):
        read_examples("vlquery_json", bad_role)


def test_missing_images_error_or_skip(root):
    f = write(root / "d.json", [{"image": "img/a.png", "prompt": "q", "chosen": "x", "rejected": "y"},
                                {"image": "img/gone.png", "prompt": "q", "chosen": "x", "rejected": "y"}])
    ex, _ = read_examples("plain_dpo", f)
    with pytest.raises(UserError, match=r"d.json\[1\]: image .*gone.png' not found"):
        drop_missing_images(ex, skip=False)
    kept, missing = drop_missing_images(ex, skip=True, workers=2)
    assert missing == 1 and len(kept) == 1


def test_select_pairs():
    """Scores a=4, b=2, c=2, d=1. Pairs (gap): ab 2, ac 2, ad 3, bc tie (dropped), bd 1, cd 1.
    margin -1 keeps the largest gap only: (a, d); margin 2 keeps ab, ac, ad."""
    scored = [("a", 4.0), ("b", 2.0), ("c", 2.0), ("d", 1.0)]
    assert select_pairs(scored, -1) == [("a", "d")]
    assert select_pairs(scored, 2) == [("a", "b"), ("a", "c"), ("a", "d")]
    assert select_pairs([("x", 1.0), ("y", 1.0)], -1) == []


def test_vlfeedback_paired_mean_ratings(root):
    """Ratings: r1 mean(5, 3) = 4, r2 mean(2) = 2 (N/A ignored), r3 mean(1, 1) = 1 -> largest gap r1 > r3."""
    a = lambda *r: {f"asp{i}": {"Rating": v, "Rationale": ""} for i, v in enumerate(r)}  # noqa: E731
    row = {"id": "1", "prompt": "Q?", "image": "img/a.png", "completions": {
        "annotations": [a("5", "3"), a("2", "N/A"), a("1", "1")], "response": ["r1", "r2", "r3"],
        "model": ["m1", "m2", "m3"]}}
    f = write(root / "vlf.json", [row])
    (ex,), _ = read_examples("vlfeedback_paired", f)
    assert (ex["chosen"], ex["rejected"]) == ("r1", "r3")
    ex2, _ = read_examples("vlfeedback_paired", f, score_margin=1.0)
    assert [(e["chosen"], e["rejected"]) for e in ex2] == [("r1", "r2"), ("r1", "r3"), ("r2", "r3")]


def test_rlhfv_parquet(root):
    import pyarrow as pa
    import pyarrow.parquet as pq

    text = json.dumps({"question": "<image>What?", "chosen": "good", "rejected": "bad"})
    pq.write_table(pa.Table.from_pylist([{"image_path": "img/a.png", "text": text, "idx": 0}]), root / "r.parquet")
    (ex,), _ = read_examples("rlhfv", root / "r.parquet")
    assert (ex["prompt"], ex["chosen"], ex["rejected"]) == ("What?", "good", "bad")
    assert ex["image"].endswith("img/a.png")


def test_split_and_hash(root):
    """10 items, ratio 0.8 -> 8 train + 2 eval, disjoint, covering all, same for the same seed."""
    tr, ev = split_train_eval(list(range(10)), 0.8, seed=1)
    assert len(tr) == 8 and len(ev) == 2 and sorted(tr + ev) == list(range(10))
    assert (tr, ev) == split_train_eval(list(range(10)), 0.8, seed=1)
    assert split_train_eval([1], 1.0, 0) == ([1], [])
    f = write(root / "h.json", [])
    assert len(data_hash([f])) == 64


def test_truncation_counts_text_tokens_only():
    """ids [BOS=1, 5, IMG=4, 4, 6, 7, 8] with BOS and both image tokens protected (positions 0, 2, 3),
    limit 2: they stay and text keeps its last 2 (7, 8) -> positions [0, 2, 3, 5, 6].
    _first_text_tokens([4, 4, 5, 6, 7], protected {0, 1}, limit 2): 5 and 6 fit, 7 is the 3rd text
    token -> prefix length 4."""
    from training.trainers.collate import _first_text_tokens, keep_prompt_end

    assert keep_prompt_end([1, 5, 4, 4, 6, 7, 8], protected={0, 2, 3}, limit=2) == [0, 2, 3, 5, 6]
    assert keep_prompt_end([5, 6], protected=set(), limit=5) == [0, 1]
    assert _first_text_tokens([4, 4, 5, 6, 7], protected={0, 1}, limit=2) == 4
    assert _first_text_tokens([4, 5], protected={0}, limit=9) == 2
