"""`answer_items` (evalsuite/tasks/answers.py), the one answer loop of the own tasks, without a model.

The cache keys are pinned: the hex digests below were written by the three loops it replaced (chair's and
caption's `generate_answers`, amber's `generate_query_answers`, mmhal's `MmhalTask.answers`, at 8ec3b47) on
the same requests, so answers a store already holds for chair, caption, amber_g/amber_d and mmhal are
still found by a rerun. A change of what enters a key fails here first."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from evalsuite.dist import Dist
from evalsuite.errors import RunFailure
from evalsuite.gen_settings import GenConfig
from tests.unit.test_empty_answers_ranks import _on_ranks

CKPT = "ck0123"
VLLM = {"engine": {"name": "vllm"}}


def _ctx(root, dist=None, engine=None, dtype=None, answer=lambda key: f"a {key} answer", asked=None):
    prompts = SimpleNamespace(prompt=lambda p: f"USER: <image>\n{p} ASSISTANT:")

    def generate(reqs, gen):
        if asked is not None:
            asked.extend((r.key, r.image, r.prompt) for r in reqs)
        return [answer(r.key) for r in reqs]

    return SimpleNamespace(dist=dist or Dist(), resume_root=root, ckpt_id=CKPT, batch_size=2, device_type="cpu",
                           dtype=dtype, engine_identity=lambda: dict(engine or {}), gen=GenConfig(max_new_tokens=7),
                           loader=SimpleNamespace(inputs=None, prompts=lambda: prompts), generate=generate)


def _cached(root: Path) -> dict[str, list[str]]:
    """{cache file under the resume root: its keys in write order}."""
    return {str(p.relative_to(root)): [json.loads(line)["key"] for line in p.read_text().splitlines()]
            for p in sorted(Path(root).rglob("*.jsonl"))}


def _chair(ctx):
    from evalsuite.tasks.chair import ChairTask

    images = [{"id": i, "path": f"{'abc'[i - 11]}.jpg"} for i in (11, 12, 13)]
    plan = SimpleNamespace(state={"images": images, "gen": GenConfig(max_new_tokens=9), "data_id": "dataid1"},
                           config={"prompt": "Describe."})
    return ChairTask().answers(ctx, plan)


def _caption(ctx):
    from evalsuite.tasks.caption import CaptionTask

    images = [{"id": i, "path": f"{'abc'[i - 11]}.jpg"} for i in (11, 12, 13)]
    ctx.gen = GenConfig(max_new_tokens=9)
    return CaptionTask().answers(ctx, SimpleNamespace(state={"images": images, "data_id": "dataid1"},
                                                      config={"prompt": "Describe."}))


def _amber(ctx):
    from evalsuite.tasks.amber import AmberDiscriminativeTask

    items = [{"id": 1, "path": "A1.jpg", "prompt": "Describe this image."},
             {"id": 5, "path": "A2.jpg", "prompt": "Is there a cat in this image?"}]
    plan = SimpleNamespace(state={"items": items, "gen": GenConfig(max_new_tokens=5), "data_id": "amberdata"})
    return AmberDiscriminativeTask().answers(ctx, plan)


def _mmhal(ctx):
    from evalsuite.tasks.mmhal import MmhalTask

    items = [{"index": i, "path": f"m{i}.jpg", "image_sha": f"{i:016x}", "image_id": f"img{i}",
              "question": f"What is in image {i}?", "question_type": "attribute"} for i in range(3)]
    return MmhalTask().answers(ctx, SimpleNamespace(state={"items": items, "data_id": "mmhaldata"}))


SHARED = "own/ck0123/answers.rank0.jsonl"
MMHAL = "own/ck0123/mmhal_answers.rank0.jsonl"
PINNED = {
    ("chair", "hf"): {SHARED: ["c35bbaf5f6fce6a1b9b3db650b87b2cbc2824e36d245c16d6d5f20a22c2ca4f7",
                               "febe00f493254e1d6729fb35cd4223f9dbbb2af6015129c7a5f66c43de2f1dd6",
                               "78d86c88a6a6fc0ef5ff8a2f13a45392301c6fc00813d71a952e35a730fb9cdc"]},
    ("chair", "vllm"): {SHARED: ["f6baee7c5932ef45cd251de6258f02d98a318b0be3bf934d88ec864da9b8f7c7",
                                 "41b9f0cf3eb9f2e22fa3da95de8894d81a63083cc0d5e70fea34f6743cb92e94",
                                 "d684aa601b0a479895d0b280ea83c02de7f31976cac75e529da2e53bdd6ef8ea"]},
    ("amber", "hf"): {SHARED: ["6e8a6fc67ed88120c6aa5a8174077d37083f6ac1c98fc5ecf83525b29eb3a367",
                               "8706982ebce3f8f16a7cdc5fb7228bd6a5e6e9b5349c6fb55881452784d02711"]},
    ("amber", "vllm"): {SHARED: ["1962dc749dec879ab05ad179682bef69c651671f9260e2b58ffa8e6feea560aa",
                                 "268f67e44175e12caa4980a26652950bf4c4c4276cb342ba56729bcded2a1342"]},
    ("mmhal", "hf"): {MMHAL: ["18c21f373ae7a4efd43d736b589ecc5ec2cf0288766fc60a6b00aa8a42a8e43b",
                              "c2a00399e208dd8179c293d6d9b9efeaef52ae104edf6500dc49b49d82f3a3aa",
                              "270dd9dc09b1759a51b513a30b333e8c1b29efeed86df7e4e8a47cb9ef6ef9e5"]},
    ("mmhal", "vllm"): {MMHAL: ["295f5e50cddb6b5293717137fe5071190fe5b7aec59546f7c0370816fe34d816",
                                "234b5867e9ba818b05e5cee9e63ad82666e078c16f27de0939fa3e634f349209",
                                "f03c7c98baa19207409cd1fb4c407d735566cdc79600583b23323ae1bb17815d"]},
}
# caption asks chair's requests: the same entries (one answer serves both)
PINNED[("caption", "hf")], PINNED[("caption", "vllm")] = PINNED[("chair", "hf")], PINNED[("chair", "vllm")]
RUN = {"chair": _chair, "caption": _caption, "amber": _amber, "mmhal": _mmhal}


@pytest.mark.parametrize("task,engine", sorted(PINNED))
def test_cache_keys_are_the_ones_stored_before(task, engine, tmp_path):
    """The keys each task writes equal those of its own loop before answer_items (HF: no engine field, the
    default dtype; vLLM: the engine and an explicit bf16 in the key); a second call answers from the cache."""
    extra = {"engine": VLLM, "dtype": "bfloat16"} if engine == "vllm" else {}
    asked = []
    first = RUN[task](_ctx(tmp_path, asked=asked, **extra))
    assert _cached(tmp_path) == PINNED[(task, engine)]
    n = len(asked)
    assert n == len(first)
    again = RUN[task](_ctx(tmp_path, asked=asked, **extra))
    assert len(asked) == n and again == first and _cached(tmp_path) == PINNED[(task, engine)]


def test_records_per_item_prompt_image_id_and_prompt_text(tmp_path):
    """mmhal's records: key = record index, image_id = the record's, its own question asked with its image."""
    asked = []
    records = _mmhal(_ctx(tmp_path, asked=asked))
    assert asked == [(str(i), f"m{i}.jpg", f"What is in image {i}?") for i in range(3)]
    assert records == [{"key": str(i), "image_id": f"img{i}", "image": f"m{i}.jpg", "prompt": f"What is in image {i}?",
                        "prompt_text": f"USER: <image>\nWhat is in image {i}? ASSISTANT:", "answer": f"a {i} answer"}
                       for i in range(3)]


def test_another_data_id_image_or_namespace_is_another_entry(tmp_path):
    from evalsuite.tasks.answers import answer_items

    item = {"id": 3, "path": "x.jpg", "prompt": "Q?"}
    keys = set()
    for data_id, extra, namespace in (("d1", {}, "answers"), ("d2", {}, "answers"), ("d1", {"image_sha": "ab"}, "answers"),
                                      ("d1", {"image_sha": "cd"}, "answers"), ("d1", {}, "objhal")):
        root = tmp_path / f"{len(keys)}"
        answer_items(_ctx(root), [{**item, **extra}], GenConfig(), data_id, "t", namespace=namespace)
        (path, got), = _cached(root).items()
        assert path == f"own/{CKPT}/{'answers' if namespace == 'answers' else namespace + '_answers'}.rank0.jsonl"
        keys.add(got[0])
    assert len(keys) == 5


def test_two_ranks_share_the_items_and_rank0_gets_all_in_order(tmp_path):
    """Each rank answers every other item (its own cache file), rank 0 gets all five records in item order,
    rank 1 None; a rerun on two ranks asks nothing."""
    from evalsuite.tasks.answers import answer_items

    items = [{"id": i, "path": f"{i}.jpg", "prompt": f"Q{i}?"} for i in range(5)]
    asked: list[list] = [[], []]

    def run(dist):
        return answer_items(_ctx(tmp_path, dist=dist, asked=asked[dist.rank]), items, GenConfig(), "d", "t")

    out = _on_ranks(run)
    assert [exc for _, exc in out] == [None, None] and out[1][0] is None
    assert [r["key"] for r in out[0][0]] == ["0", "1", "2", "3", "4"]
    assert [a[0] for a in asked[0]] == ["0", "2", "4"] and [a[0] for a in asked[1]] == ["1", "3"]
    files = _cached(tmp_path)
    assert sorted(files) == [f"own/{CKPT}/answers.rank0.jsonl", f"own/{CKPT}/answers.rank1.jsonl"]
    again = _on_ranks(run)
    assert again[0][0] == out[0][0] and [len(a) for a in asked] == [3, 2]


def test_empty_answers_fail_on_every_rank_with_the_task_named(tmp_path):
    from evalsuite.tasks.answers import answer_items

    items = [{"id": i, "path": f"{i}.jpg", "prompt": f"Q{i}?"} for i in range(4)]
    out = _on_ranks(lambda d: answer_items(_ctx(None, dist=d, answer=lambda k: "" if k != "1" else "x"), items,
                                           GenConfig(), "d", "objhal"))
    errors = [exc for _, exc in out]
    assert all(isinstance(e, RunFailure) for e in errors) and str(errors[0]) == str(errors[1])
    assert str(errors[0]).startswith("objhal: 3 of 4 answers are empty") and "prompt 'USER: <image>\\nQ0? ASSISTANT:'" \
        in str(errors[0])


def test_an_item_id_that_is_not_an_int_is_a_programming_error(tmp_path):
    from evalsuite.tasks.answers import answer_items

    with pytest.raises(TypeError, match="answer_items: hallusion: item id 'q1' is not an int"):
        answer_items(_ctx(tmp_path), [{"id": "q1", "path": "x.jpg", "prompt": "Q?"}], GenConfig(), "d", "hallusion")
    assert _cached(tmp_path) == {}
