"""The per-sample response cache behind `evalsuite run` resume (no lmms_eval import here)."""
from __future__ import annotations

import json

from evalsuite.models.cache import ResponseCache, request_key


def test_key_covers_every_field_and_ignores_dict_order():
    base = request_key("ck", "mme", "generate_until", 3, "Q?", {"max_new_tokens": 16, "until": ["\n\n"]})
    assert base == request_key("ck", "mme", "generate_until", 3, "Q?", {"until": ["\n\n"], "max_new_tokens": 16})
    variants = [
        request_key("ck2", "mme", "generate_until", 3, "Q?", {"max_new_tokens": 16, "until": ["\n\n"]}),
        request_key("ck", "pope", "generate_until", 3, "Q?", {"max_new_tokens": 16, "until": ["\n\n"]}),
        request_key("ck", "mme", "loglikelihood", 3, "Q?", {"max_new_tokens": 16, "until": ["\n\n"]}),
        request_key("ck", "mme", "generate_until", 4, "Q?", {"max_new_tokens": 16, "until": ["\n\n"]}),
        request_key("ck", "mme", "generate_until", 3, "Q!", {"max_new_tokens": 16, "until": ["\n\n"]}),
        request_key("ck", "mme", "generate_until", 3, "Q?", {"max_new_tokens": 17, "until": ["\n\n"]}),
    ]
    assert len({base, *variants}) == 7


def test_put_then_reload_in_a_new_instance(tmp_path):
    c = ResponseCache(tmp_path, "ck", "mme")
    c.put_many([("k1", 0, "generate_until", "Yes"), ("k2", 1, "generate_until", "No")])
    c.put_many([("k3", 2, "loglikelihood", [-1.5, True])])
    assert c.written == 3
    again = ResponseCache(tmp_path, "ck", "mme")
    assert len(again) == 3
    assert again.get("k1") == "Yes" and again.get("k3") == [-1.5, True]
    assert again.get("missing") is None
    assert again.hits == 2
    # one file per (checkpoint, task, rank); another task or checkpoint sees nothing
    assert (tmp_path / "ck" / "mme.rank0.jsonl").is_file()
    assert len(ResponseCache(tmp_path, "ck", "pope")) == 0
    assert len(ResponseCache(tmp_path, "other", "mme")) == 0


def test_torn_last_line_is_skipped_and_the_next_append_is_not_swallowed(tmp_path):
    """A writer killed mid-line leaves `{"key": "k2", "doc` with no newline. The reader skips it;
    the next writer terminates it first, so its own first record stays readable."""
    c = ResponseCache(tmp_path, "ck", "mme")
    c.put_many([("k1", 0, "generate_until", "Yes")])
    with open(c.path, "a") as fh:
        fh.write('{"key": "k2", "doc')
    torn = ResponseCache(tmp_path, "ck", "mme")
    assert len(torn) == 1
    torn.put_many([("k3", 2, "generate_until", "No")])
    final = ResponseCache(tmp_path, "ck", "mme")
    assert final.get("k1") == "Yes" and final.get("k3") == "No" and "k2" not in final
    lines = c.path.read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[2])["key"] == "k3"


def test_ranks_write_their_own_files_and_read_each_other(tmp_path):
    r0 = ResponseCache(tmp_path, "ck", "pope", rank=0)
    r1 = ResponseCache(tmp_path, "ck", "pope", rank=1)
    r0.put_many([("a", 0, "generate_until", "yes")])
    r1.put_many([("b", 1, "generate_until", "no")])
    assert r0.path != r1.path
    merged = ResponseCache(tmp_path, "ck", "pope", rank=0)
    assert merged.get("a") == "yes" and merged.get("b") == "no"
