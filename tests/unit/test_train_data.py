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


def test_vlfeedback_na_drops_every_pair_of_that_completion(root):
    """VL-RLHF (utils/data.py): float("N/A") raises, so every pair with that completion is skipped.
    Ratings r1 (5, 3) -> 4, r2 (2, N/A) -> unusable, r3 (1, 1) -> 1: the one pair left is r1 > r3,
    whatever the margin (averaging r2's other aspect would also give r1 > r2 and r2 > r3).
    Three aspects (5,5,5), (4,N/A,2), (3,3,3): one pair, r1 > r3."""
    a = lambda *r: {f"asp{i}": {"Rating": v, "Rationale": ""} for i, v in enumerate(r)}  # noqa: E731
    row = {"id": "1", "prompt": "Q?", "img_path": "img/a.png", "completions": {
        "annotations": [a("5", "3"), a("2", "N/A"), a("1", "1")], "response": ["r1", "r2", "r3"],
        "model": ["m1", "m2", "m3"]}}
    f = write(root / "vlf.json", [row])
    (ex,), _ = read_examples("vlfeedback_paired", f)
    assert (ex["chosen"], ex["rejected"]) == ("r1", "r3")
    ex2, _ = read_examples("vlfeedback_paired", f, score_margin=1.0)
    assert [(e["chosen"], e["rejected"]) for e in ex2] == [("r1", "r3")]
    three = {**row, "completions": [{"annotations": a(*r), "response": n} for r, n in
                                    ((("5", "5", "5"), "r1"), (("4", "N/A", "2"), "r2"), (("3", "3", "3"), "r3"))]}
    ex3, _ = read_examples("vlfeedback_paired", write(root / "vlf3.json", [three]), score_margin=0.0)
    assert [(e["chosen"], e["rejected"]) for e in ex3] == [("r1", "r3")]


def test_vlfeedback_missing_rating_is_an_error(root):
    """VL-RLHF reads float(anno[aspect]["Rating"]) and catches ValueError only: a missing "Rating" key
    (KeyError) or a null one (TypeError) stops it. Ours: an error naming the row, completion and aspect.
    "N/A" (ValueError) still only drops that completion's pairs."""
    for bad in ({"Rationale": "x"}, {"Rating": None}, "5"):
        row = {"prompt": "Q?", "img_path": "img/a.png", "completions": [
            {"annotations": {"h": {"Rating": "5"}}, "response": "good"},
            {"annotations": {"h": {"Rating": "1"}, "v": bad}, "response": "bad"}]}
        with pytest.raises(UserError, match=r"vm.json\[0\]: completions\[1\]: aspect 'v' has no rating"):
            read_examples("vlfeedback_paired", write(root / "vm.json", [row]))


def test_vlfeedback_image_is_img_path_and_never_silently_dropped(root):
    """VLFeedback rows carry the image under `img_path`: it is joined under image_root. A row with no
    image at all is an error naming the row; a missing image file is an error naming the row too."""
    a = {"h": {"Rating": "5"}}
    b = {"h": {"Rating": "1"}}
    row = {"prompt": "Q?", "img_path": "img/a.png", "completions": [{"annotations": a, "response": "good"},
                                                                       {"annotations": b, "response": "bad"}]}
    (ex,), _ = read_examples("vlfeedback_paired", write(root / "v.json", [row]))
    assert ex["image"] == str(root / "img" / "a.png")
    with pytest.raises(UserError, match=r"v2.json\[0\]: VLFeedback rows need an image"):
        read_examples("vlfeedback_paired", write(root / "v2.json", [{k: v for k, v in row.items() if k != "img_path"}]))
    gone, _ = read_examples("vlfeedback_paired", write(root / "v3.json", [{**row, "img_path": "img/none.png"}]))
    with pytest.raises(UserError, match=r"v3.json\[0\]: image .*none.png.* not found"):
        drop_missing_images(gone, skip=False)


def test_rlhfv_parquet(root):
    import pyarrow as pa
    import pyarrow.parquet as pq

    text = json.dumps({"question": "<image>What?", "chosen": "good", "rejected": "bad"})
    pq.write_table(pa.Table.from_pylist([{"image_path": "img/a.png", "text": text, "idx": 0}]), root / "r.parquet")
    (ex,), _ = read_examples("rlhfv", root / "r.parquet")
    assert (ex["prompt"], ex["chosen"], ex["rejected"]) == ("What?", "good", "bad")
    assert ex["image"].endswith("img/a.png")


def test_split_is_vlrlhf_s(root):
    """VL-RLHF dpo.py: train_test_split(test_size=0.005, seed=42), then the first int(len(train) * ratio)
    train rows. 200 items: ceil(0.005 * 200) = 1 eval row, 199 train; ratio 0.5 keeps int(99.5) = 99 of
    them, in the split's order; nothing else is used. eval_split 0: the original order, first 8 of 10."""
    from datasets import Dataset

    want = Dataset.from_dict({"i": list(range(200))}).train_test_split(test_size=0.005, seed=42)
    tr, ev = split_train_eval(list(range(200)), 0.005, 0.5)
    assert ev == want["test"]["i"] and len(ev) == 1
    assert tr == want["train"]["i"][:99]
    assert split_train_eval(list(range(10)), 0.0, 0.8) == (list(range(8)), [])
    assert split_train_eval([1], 0.005, 1.0) == ([1], [])
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


def _tok():
    """Image token 4 (not text) and a leading BOS 1 (text, but never cut), as `_Tok` finds them here."""
    from types import SimpleNamespace

    from training.trainers.collate import keep_prompt_end

    def protected(ids):
        return {i for i, x in enumerate(ids) if x == 4 or (i == 0 and x == 1)}

    return SimpleNamespace(text_len=lambda ids: sum(1 for x in ids if x != 4),
                           cut_prompt=lambda row, n: row.take(keep_prompt_end(row.ids, protected(row.ids), n)))


def _pair(p, answers, *args):
    from training.trainers.collate import _Row, truncate_pair

    prompt, answers = truncate_pair(_Row(p, {}), answers, _tok(), *args)
    return prompt.ids, answers


def test_truncate_pair_vlrlhf_only_when_too_long():
    """TRL 0.8.1 (VL-RLHF): prompt [BOS, 5, IMG, IMG, 6, 7, 8] has 5 text tokens, answers 3 and 6 tokens.
    max_length 12: 5 + 6 = 11 fits, nothing is cut, though the prompt is longer than max_prompt_length 3.
    max_length 10: 11 > 10 -> the prompt keeps BOS, the images and its last 3 text tokens (4 text tokens);
      4 + 6 = 10 fits -> answers untouched.
    max_length 8: prompt cut as above, 4 + 6 > 8 -> both answers cut to 8 - 3 = 5 tokens.
    max_target_length (2) is never used."""
    p, c, r = [1, 5, 4, 4, 6, 7, 8], [20, 21, 2], [30, 31, 32, 33, 34, 2]
    assert _pair(p, [c, r], 12, 3, 2) == (p, [c, r])
    assert _pair(p, [c, r], 10, 3, 2) == ([1, 4, 4, 6, 7, 8], [c, r])
    assert _pair(p, [c, r], 8, 3, 2) == ([1, 4, 4, 6, 7, 8], [c, r[:5]])


def test_truncate_pair_per_field():
    """per_field: the prompt always keeps its last 3 text tokens; each answer its first min(2, room) tokens."""
    p, c, r = [1, 5, 4, 4, 6, 7, 8], [20, 21, 2], [30, 31, 32, 33, 34, 2]
    assert _pair(p, [c, r], 12, 3, 2, "per_field") == ([1, 4, 4, 6, 7, 8], [c[:2], r[:2]])
    assert _pair(p, [c, r], 5, 3, 9, "per_field") == ([1, 4, 4, 6, 7, 8], [c[:1], r[:1]])


def test_sft_answers_are_not_cut_by_max_target_length(tiny_vlm_dir):
    """VL-RLHF's SFT only cuts the whole sequence at max_length; per_field also caps each answer."""
    from transformers import AutoProcessor

    from training.trainers.collate import SFTCollator

    proc = AutoProcessor.from_pretrained(tiny_vlm_dir)
    ex = {"image": None, "image_bytes": None, "messages": [
        {"role": "user", "content": "describe the image."},
        {"role": "assistant", "content": "a red cup is on the left of a blue cup."}]}
    labelled = lambda cfg: int((SFTCollator(proc, **cfg)([ex])["labels"] != -100).sum())  # noqa: E731
    full = labelled(dict(max_length=512, max_target_length=3))
    assert full > 3 and labelled(dict(max_length=512, max_target_length=3, truncation="per_field")) == 3


def test_sft_trains_every_record_and_evaluates_the_vlrlhf_split():
    """VL-RLHF sft.py: the same train_test_split(test_size=0.005, seed=42) is drawn, but the trainer gets
    train_dataset=dataset: all 200 records train, in file order, the eval row among them. data_ratio has
    no effect there: the config refuses or warns about one (tests/unit/test_unread.py), the split never reads it."""
    from datasets import Dataset

    want = Dataset.from_dict({"i": list(range(200))}).train_test_split(test_size=0.005, seed=42)
    tr, ev = split_train_eval(list(range(200)), 0.005, 1.0, eval_in_train=True)
    assert tr == list(range(200)) and ev == want["test"]["i"] and len(ev) == 1 and ev[0] in tr
    assert split_train_eval(list(range(10)), 0.0, 1.0, eval_in_train=True) == (list(range(10)), [])
    assert split_train_eval(list(range(10)), 0.0, 0.5, eval_in_train=True) == (list(range(10)), [])


def test_a_data_ratio_that_keeps_no_example_is_one_error_where_the_split_is_made():
    """The one data_ratio check that needs the data (its range and its sft_split rule are the config's)."""
    with pytest.raises(UserError, match=r"^data_ratio: 0.05 of 10 training examples \(after the eval_split of 0\) "
                                        r"keeps none; raise data_ratio to at least 0.1$"):
        split_train_eval(list(range(10)), 0.0, 0.05)
    assert split_train_eval(list(range(10)), 0.0, 0.1) == ([0], [])
    assert split_train_eval([], 0.0, 0.05) == ([], [])  # no examples: load_examples says so first


def _sft_cfg(root, n, **extra):
    from training.config import load_config

    (root / "m").mkdir(exist_ok=True)
    (root / "m" / "config.json").write_text("{}")
    rows = [{"image": "a.png", "conversations": [{"from": "user", "value": f"q{i}"},
                                                 {"from": "assistant", "value": f"a{i}"}]} for i in range(n)]
    f = write(root / "sft.json", rows)
    return load_config({"method": "sft", "model_name_or_path": str(root / "m"), "output_dir": str(root / "o"),
                        "data_path": str(f), "image_root": str(root / "img"), **extra})


def test_load_examples_sft_default_and_held_out_switch(root):
    """20 records, eval_split 0.1 (2 rows): by default (sft_split vlrlhf) all 20 train in file order and
    the 2 eval rows are among them; held_out trains the other 18, then data_ratio 0.5 keeps int(9.0) = 9."""
    from training.data import load_examples

    train, ev, info = load_examples(_sft_cfg(root, 20, eval_split=0.1))
    assert (info["train"], info["eval"], info["eval_in_train"]) == (20, 2, True)
    assert [m[-1]["content"] for m in train["messages"]] == [f"a{i}" for i in range(20)]
    assert {m[-1]["content"] for m in ev["messages"]} <= {f"a{i}" for i in range(20)} and len(ev) == 2
    _, _, held = load_examples(_sft_cfg(root, 20, eval_split=0.1, sft_split="held_out"))
    assert (held["train"], held["eval"], held["eval_in_train"]) == (18, 2, False)
    _, _, half = load_examples(_sft_cfg(root, 20, eval_split=0.1, sft_split="held_out", data_ratio=0.5))
    assert (half["train"], half["eval"]) == (9, 2)


def test_plain_dpo_record_read_as_the_default_vlfeedback_names_plain_dpo(root):
    f = write(root / "p.json", [{"image": "a.png", "prompt": "Q", "chosen": "x", "rejected": "y"}])
    with pytest.raises(UserError, match=r"p.json\[0\]: no 'completions' .*--dataset_name plain_dpo"):
        read_examples("vlfeedback_paired", f)
