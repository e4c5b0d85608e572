"""Nothing scores nothing under several ranks: the empty-answers verdict is collective.

Two ranks are two threads here, joined by a fake Dist whose gather/broadcast meet at a threading.Barrier
(with a timeout): a rank left waiting for a partner that raised shows as a broken barrier instead of a
hang. The real 2-process run is tests/integration/test_empty_answers_ranks.py (slow).
"""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from evalsuite.dist import Dist
from evalsuite.errors import RunFailure
from evalsuite.gen_settings import GenConfig


class ThreadDist:
    """Dist's interface for one of `world` threads: gather/broadcast are real rendezvous."""

    def __init__(self, rank: int, hub):
        self.rank, self.world_size, self.hub = rank, hub.world, hub
        self._dist = Dist(rank, hub.world)

    is_main = property(lambda self: self.rank == 0)
    distributed = property(lambda self: True)

    def shard(self, items):
        return self._dist.shard(items)

    def unshard(self, parts):
        return self._dist.unshard(parts)

    def _meet(self):
        self.hub.barrier.wait()

    def gather(self, obj):
        self.hub.slots[self.rank] = obj
        self._meet()
        out = list(self.hub.slots) if self.is_main else None
        self._meet()
        return out

    def broadcast(self, obj):
        if self.is_main:
            self.hub.box = obj
        self._meet()
        out = self.hub.box
        self._meet()
        return out

    def barrier(self):
        self._meet()


def _hub(world=2):
    # the timeout only ends a rank left waiting (a failure); generous, as a loaded machine can stall a thread
    return SimpleNamespace(world=world, barrier=threading.Barrier(world, timeout=60), slots=[None] * world, box=None)


def _on_ranks(fn, world=2):
    """fn(dist) on `world` threads; [(returned, raised)] per rank. A rank still waiting after the others
    left fails its barrier (BrokenBarrierError), which the caller sees as that rank's exception."""
    hub = _hub(world)
    out = [None] * world

    def target(rank):
        try:
            out[rank] = (fn(ThreadDist(rank, hub)), None)
        except BaseException as exc:  # noqa: BLE001 - reported per rank
            out[rank] = (None, exc)

    threads = [threading.Thread(target=target, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def _ctx(dist, answer_of):
    """What generate_answers reads from a RunContext: no resume cache, a model answering answer_of(image id)."""
    prompts = SimpleNamespace(prompt=lambda p: f"USER: {p}")
    return SimpleNamespace(
        dist=dist, resume_root=None, loader=SimpleNamespace(inputs=None, prompts=lambda: prompts),
        device_type="cpu", dtype=None, engine_identity=dict, ckpt_id="ck", batch_size=2,
        generate=lambda reqs, gen: [answer_of(r.key) for r in reqs])


IMAGES = [{"id": i, "path": f"img{i}.png"} for i in range(6)]


def _answer_then_meet(answer_of):
    def run(dist):
        from evalsuite.tasks.answers import generate_answers

        records = generate_answers(_ctx(dist, answer_of), IMAGES, "Describe.", GenConfig(), "data", task="caption")
        dist.barrier()  # the next collective of the run: every rank must get here, or none
        return records
    return run


def test_every_rank_fails_with_rank0s_verdict_when_only_one_shard_is_empty():
    """Rank 1 answers images 1, 3, 5 with "", rank 0 answers 0, 2, 4: each shard alone is all or nothing,
    the gathered 6 have 3 empty (allowed, exactly half); with image 0 empty too (4 of 6) both ranks raise
    the same one-line RunFailure, neither waits at the next collective."""
    ok = _on_ranks(_answer_then_meet(lambda k: "" if int(k) % 2 else "a dog"))
    assert ok[1] == (None, None) and ok[0][1] is None
    assert [r["answer"] for r in ok[0][0]] == ["a dog", "", "a dog", "", "a dog", ""]

    failed = _on_ranks(_answer_then_meet(lambda k: "" if int(k) % 2 or k == "0" else "a dog"))
    errors = [exc for _, exc in failed]
    assert all(isinstance(e, RunFailure) for e in errors), errors
    assert str(errors[0]) == str(errors[1]) and errors[0].exit_code == errors[1].exit_code == 1
    msg = str(errors[1])
    assert msg.startswith("caption: 4 of 6 answers are empty (more than 50%); nothing stored for it and the "
                          "run stops here") and "Sample: image 0, prompt 'USER: Describe.' -> answer ''" in msg, msg
    assert "\n" not in msg


def test_fail_together_follows_rank0_whatever_the_others_pass():
    from evalsuite.tasks.answers import fail_together

    def verdict(rank0, other):
        return _on_ranks(lambda d: fail_together(d, rank0 if d.is_main else other))

    assert verdict(None, "rank 1 thinks it failed") == [(None, None), (None, None)]
    errors = [exc for _, exc in verdict("x: 3 of 4 answers are empty", None)]
    assert [str(e) for e in errors] == ["x: 3 of 4 answers are empty"] * 2
    # marked as raised on every rank: `evalsuite run` lets each rank say it and meet before any exits
    assert all(e.collective for e in errors)
    fail_together(Dist(), None)  # one process: no collective, nothing raised
    with pytest.raises(RunFailure, match="^y$") as one:
        fail_together(Dist(), "y")
    assert not one.value.collective


def _spec(*leaves):
    from evalsuite.lmms.task import Leaf, LmmsSpec

    name = leaves[0][0].split("/")[0]
    kind = "group" if "/" in leaves[0][0] else "task"
    return LmmsSpec(name, name, kind, [], [Leaf(task, shown, shown.split("/")[-1]) for shown, task in leaves])


def _counts(total, empty, doc=None, prompt="Is there a cat?"):
    return {"total": total, "empty": empty, "sample": None if doc is None else (doc, prompt, "")}


def test_lmms_counts_sum_over_ranks_per_leaf():
    """Per leaf, every rank's generate_until counts (EvalsuiteLMM.answer_counts) add up before the rule
    applies: 2 + 2 of 8 empty passes, 3 + 2 of 8 fails naming the leaf, the share and rank 1's sample."""
    from evalsuite.lmms.task import empty_answers_failure

    spec = _spec(("pope", "evalsuite_pope"))
    assert empty_answers_failure(spec, [{"evalsuite_pope": _counts(4, 2, 0)},
                                        {"evalsuite_pope": _counts(4, 2, 1)}]) is None
    assert empty_answers_failure(spec, [{}, {}]) is None  # a loglikelihood task: no generate_until answers
    msg = empty_answers_failure(spec, [{"evalsuite_pope": _counts(4, 2)},
                                       {"evalsuite_pope": _counts(4, 3, 5, "x" * 300)}])
    assert msg.startswith("pope: 5 of 8 answers are empty (more than 50%); nothing stored for it and the run "
                          "stops here (tasks finished before it stay stored). Sample: doc 5, prompt 'xxx"), msg
    assert "x" * 201 not in msg and msg.endswith("...' -> answer ''")


def test_lmms_group_leaf_failure_names_the_group_as_not_stored():
    from evalsuite.lmms.task import empty_answers_failure

    spec = _spec(("pope_full/pope_adv", "evalsuite_pope_adversarial"), ("pope_full/pope_pop", "evalsuite_pope_popular"),
                 ("pope_full/pope_random", "evalsuite_pope_random"))
    parts = [{"evalsuite_pope_adversarial": _counts(4, 1, 2), "evalsuite_pope_popular": _counts(4, 4, 0),
              "evalsuite_pope_random": _counts(4, 3, 1)}]
    msg = empty_answers_failure(spec, parts)
    assert msg.startswith("pope_full/pope_pop: 4 of 4 answers are empty (more than 50%); nothing stored for "
                          "pope_full and the run stops here"), msg
    assert msg.endswith(" Also more than 50% empty: pope_full/pope_random.")
