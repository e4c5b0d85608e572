"""bench/csr_floor.py's counts on hand-made sentences (the floor argument of docs/csr-engine.md)."""
from __future__ import annotations

from bench.csr_floor import draft, node_forwards


def test_draft_continues_the_most_recent_match_longest_first():
    assert draft([5, 6, 7, 5, 6], [], 3) == [7, 5, 6]
    assert draft([9, 1], [[4, 1, 2, 3]], 2) == [2, 3]   # from the corpus when the row has no earlier match
    assert draft([9, 8], [[1, 2]], 2) == []


def test_without_drafts_a_node_takes_one_forward_per_token_of_its_longest_sentence():
    assert node_forwards([], [[1] * 7, [2] * 20, [3] * 4], [], 0) == 20


def test_a_loop_is_verified_several_tokens_a_forward_but_the_slowest_group_sets_the_count():
    loop = [1, 2, 3] * 6  # 18 tokens: after one round the n-gram draft predicts it exactly
    assert node_forwards([], [loop], [], 4) < 18 / 2  # 3 forwards to see the loop once, then 5 tokens each
    unpredictable = list(range(10, 28))  # no token repeats: every draft misses
    assert node_forwards([], [loop, unpredictable], [], 4) == 18
    # group 1 may not pass group 0: a predictable group behind an unpredictable one gains nothing
    assert node_forwards([], [unpredictable, loop], [], 4) == 18
