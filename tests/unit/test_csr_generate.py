"""Sentence-level CSR search on the tiny checkpoint: the in-project group beam search against
transformers' own beam search, diversity, EOS handling, pruning and batched == one-at-a-time."""
from __future__ import annotations

import pytest

from training.csr.clean import junk_reason
from training.csr.config import TreeConfig
from training.csr.generate import TreeGenerator, read_trees, sentence_end_ids, write_trees
from training.csr.search import SearchSpec, group_beam_search, sample_search


@pytest.fixture(scope="module")
def image_root(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("csr_images")
    for i in range(6):
        Image.new("RGB", (32, 32), (40 * i, 220 - 30 * i, 90 + 20 * i)).save(root / f"{i}.png")
    return root


def _records(n):
    return [{"id": f"p{i}", "image": f"{i}.png", "question": "Describe the image."} for i in range(n)]


def _inputs(vlm, image_root, i=1):
    from evalsuite.models.vlm import build_prompt, load_image

    img = load_image(image_root / f"{i}.png")
    return vlm.processor(images=[img], text=[build_prompt(vlm, "Describe the image.")], return_tensors="pt")


def _spec(vlm, **kw):
    from evalsuite.models.vlm import suppressed_token_ids

    tok = vlm.tokenizer
    stops = tuple(sentence_end_ids(tok, [".", "!", "?"]) + [tok.eos_token_id])
    sup = tuple(i for i in suppressed_token_ids(vlm.processor, vlm.model.config, vlm.model.generation_config) if i != tok.eos_token_id)
    return SearchSpec(stop_ids=stops, suppress_ids=sup, pad_id=tok.pad_token_id, **kw)


def _hf_strip(seq, prompt_len, pad):
    ids = seq[prompt_len:].tolist()
    while ids and ids[-1] == pad:
        ids.pop()
    return tuple(ids)


def test_sentence_end_ids_are_the_marks(vlm):
    tok = vlm.tokenizer
    ids = sentence_end_ids(tok, [".", "!", "?"])
    assert sorted(tok.decode([i]).strip() for i in ids) == ["!", ".", "?"]


@pytest.mark.parametrize("max_new", [5, 12])
def test_one_group_equals_transformers_beam_search(vlm, image_root, max_new):
    """G=1, B=5: our search returns HF `generate(num_beams=5, num_return_sequences=5)` exactly
    (same token ids, same `sequences_scores`), with the same stop ids and suppressed tokens."""
    enc = _inputs(vlm, image_root)
    spec = _spec(vlm, num_beams=5, num_beam_groups=1, diversity_penalty=0.0, max_new_tokens=max_new)
    ours = group_beam_search(vlm.model, [enc["input_ids"][0].tolist()], enc["pixel_values"], spec)[0]
    hf = vlm.model.generate(**enc, num_beams=5, num_return_sequences=5, max_new_tokens=max_new,
                            eos_token_id=list(spec.stop_ids), suppress_tokens=list(spec.suppress_ids),
                            do_sample=False, return_dict_in_generate=True, output_scores=True,
                            pad_token_id=spec.pad_id)
    L = enc["input_ids"].shape[1]
    assert [h.ids for h in ours] == [_hf_strip(s, L, spec.pad_id) for s in hf.sequences]
    assert [h.score for h in ours] == pytest.approx(hf.sequences_scores.tolist(), abs=1e-5)


def test_zero_penalty_groups_all_equal_greedy(vlm, image_root):
    """5 groups of 1 beam with penalty 0 are 5 independent greedy searches: all equal HF greedy."""
    enc = _inputs(vlm, image_root)
    spec = _spec(vlm, num_beams=5, num_beam_groups=5, diversity_penalty=0.0, max_new_tokens=10)
    ours = group_beam_search(vlm.model, [enc["input_ids"][0].tolist()], enc["pixel_values"], spec)[0]
    greedy = vlm.model.generate(**enc, do_sample=False, num_beams=1, max_new_tokens=10,
                                eos_token_id=list(spec.stop_ids), suppress_tokens=list(spec.suppress_ids),
                                pad_token_id=spec.pad_id)
    want = _hf_strip(greedy[0], enc["input_ids"].shape[1], spec.pad_id)
    assert len(ours) == 5 and all(h.ids == want for h in ours)


def test_diversity_penalty_makes_groups_differ(vlm, image_root):
    """Penalty 3.0 on a near-uniform random model (token log-probs within ~1 nat of each other):
    every group's first token is pushed off the tokens earlier groups chose, so the 5 first tokens differ."""
    enc = _inputs(vlm, image_root)
    spec = _spec(vlm, num_beams=5, num_beam_groups=5, diversity_penalty=3.0, max_new_tokens=10)
    ours = group_beam_search(vlm.model, [enc["input_ids"][0].tolist()], enc["pixel_values"], spec)[0]
    assert sorted(h.group for h in ours) == [0, 1, 2, 3, 4]
    assert len({h.ids[0] for h in ours}) == 5
    # group 0 carries no penalty: it is the greedy continuation
    greedy = vlm.model.generate(**enc, do_sample=False, max_new_tokens=10, eos_token_id=list(spec.stop_ids),
                                suppress_tokens=list(spec.suppress_ids), pad_token_id=spec.pad_id)
    assert next(h for h in ours if h.group == 0).ids == _hf_strip(greedy[0], enc["input_ids"].shape[1], spec.pad_id)


def _tree_signature(trees):
    return [[(n.id, n.parent, n.sentence_ids, n.status, n.is_final) for n in t.nodes] for t in trees]


@pytest.mark.parametrize("expander", ["group_beam", "sample"])
def test_batched_equals_one_at_a_time(vlm, image_root, expander):
    cfg = dict(expander=expander, max_new_tokens=8, max_depth=3, engine="reference",  # pool: test_csr_pool.py
               **({"num_samples": 4} if expander == "sample" else {}))
    batched = TreeGenerator(vlm, TreeConfig(**cfg, batch_nodes=64, prompt_batch=4), image_root).generate(_records(4))
    single = TreeGenerator(vlm, TreeConfig(**cfg, batch_nodes=1, prompt_batch=1), image_root).generate(_records(4))
    # no count caps: batches and chunks as a small KV budget allows (several of each here)
    budgeted = TreeGenerator(vlm, TreeConfig(**cfg, kv_budget=1500), image_root).generate(_records(4))
    assert _tree_signature(batched) == _tree_signature(single) == _tree_signature(budgeted)
    for a, b in zip(batched, single):
        assert [n.lm_score for n in a.nodes] == pytest.approx([n.lm_score for n in b.nodes], abs=1e-4)


@pytest.fixture(scope="module")
def trees(vlm, image_root):
    """Our rule (`stop: sentence_marks`, token/depth caps, dedupe, filter before pruning, suppression)."""
    cfg = TreeConfig(max_new_tokens=10, max_depth=4, max_response_tokens=30, max_chars=None, stop="sentence_marks",
                     dedupe_siblings=True, junk_filter="before_pruning", suppress_special_tokens=True)
    return TreeGenerator(vlm, cfg, image_root).generate(_records(6), progress=False)


def test_no_token_after_eos_and_eos_ends_the_branch(vlm, trees):
    from evalsuite.models.vlm import suppressed_token_ids

    eos = vlm.tokenizer.eos_token_id
    banned = set(suppressed_token_ids(vlm.processor, vlm.model.config, vlm.model.generation_config)) - {eos}
    n_eos = 0
    for t in trees:
        for n in t.nodes:
            assert eos not in n.prefix_ids
            assert not banned & set(n.sentence_ids)
            if eos in n.sentence_ids:
                n_eos += 1
                assert n.sentence_ids.index(eos) == len(n.sentence_ids) - 1
                assert n.has_eos and not n.children and (n.is_final or not n.usable)
                assert eos not in n.response_ids
    assert n_eos > 0, "the test needs at least one EOS branch to mean anything"


def test_pruning_keeps_one_best_two_worst_per_depth(trees):
    """k=5: with >= 5 live children at a depth, floor(5/2)-1 = 1 best and floor(5/2) = 2 worst by
    cumulative LM score are expanded; with fewer, all of them are (the released rule)."""
    for t in trees:
        for depth in range(1, 5):
            live = [n for n in t.nodes if n.depth == depth and n.status in ("expanded", "pruned")]
            kept = [n for n in live if n.status == "expanded"]
            if len(live) < 5:
                assert kept == live
            else:
                ranked = sorted(live, key=lambda n: (-n.lm_score, n.id))
                assert {n.id for n in kept} == {ranked[0].id, ranked[-2].id, ranked[-1].id}


def test_every_tree_has_complete_paths_and_caps_hold(trees):
    for t in trees:
        assert t.complete_paths()
        for n in t.nodes:
            assert n.depth <= 4 and len(n.prefix_ids) < 30
            assert len(n.sentence_ids) <= 10


def test_trees_round_trip(trees, tmp_path):
    write_trees(tmp_path / "t.jsonl", trees)
    assert [x.to_dict() for x in read_trees(tmp_path / "t.jsonl")] == [x.to_dict() for x in trees]


@pytest.mark.parametrize("text,reason", [
    ("A red circle is on the left.", None),
    ("The cat.", None),
    ("Hi.", "too_short"),
    ("Это кот.", "foreign_script"),
    ("고양이 입니다 a cat.", "foreign_script"),
    ("A cat \U0001F600 sits.", "foreign_script"),
    ("a a a a a a cat.", "word_repeat"),
    ("a a a a a cat.", None),
    ("wow !!!!!!!!!!!", "char_repeat"),
    ("x x x x x x x x x x x", "word_repeat"),
    ("space&nbsp;&nbsp;here.", "nbsp"),
    ("a\nb\nc\nd\ne\nf\ng", "newlines"),
])
def test_cleaning_rules(text, reason):
    """Our rules (`tree.junk_rules: broad`); the released ones: tests/unit/test_csr_clean.py."""
    assert junk_reason(text, 4, "broad") == reason


def test_sampling_never_emits_suppressed_tokens(vlm, image_root):
    enc = _inputs(vlm, image_root)
    spec = _spec(vlm, max_new_tokens=12)
    out = sample_search(vlm.model, [enc["input_ids"][0].tolist()], enc["pixel_values"], spec, 8, ["k"], seed=3)[0]
    assert len(out) == 8
    for h in out:
        assert not set(h.ids) & set(spec.suppress_ids)
        assert h.ids[-1] in spec.stop_ids or len(h.ids) == 12
