"""The judged tasks under torchrun --nproc_per_node 2 (CPU, gloo), in one launch: mmhal, amber_g, amber_d,
objhal and hallusion (rule mode) with one fake judge (tests/judge_fake.py) that answers each task's prompt as
that task's own tests do. The ranks share every task's answering (each rank its own resume cache file), rank 0
alone asks the judge (once per judged answer) and stores each task once, the records back in query order, with
the eval keys and numbers of a one-process run; a judge that ignores mmhal's format fails on both ranks with
one line."""
from __future__ import annotations

import json
import os
import re
import sys

import pytest

from tests.integration.test_amber_run import PIPELINE as AMBER_PIPELINE
from tests.integration.test_amber_run import amber_world  # noqa: F401  (fixture)
from tests.integration.test_hallusion_run import hb_data  # noqa: F401  (fixture)
from tests.integration.test_mmhal_run import mmhal_data  # noqa: F401  (fixture)
from tests.integration.test_objhal_run import DATA as OBJHAL_DATA
from tests.integration.test_objhal_run import _reply as objhal_reply
from tests.integration.test_objhal_run import objhal_data  # noqa: F401  (fixture)
from tests.judge_fake import FakeJudge, rating_reply
from tests.unit.test_amber import nltk_ready  # noqa: F401  (fixture)

TASKS = ("mmhal", "amber_g", "amber_d", "objhal", "hallusion")
# the mark of each judged task's prompt: mmhal's rating prompt, objhal's object listing, hallusion's rule-mode match
PROMPTS = {"mmhal": "### LMM Response to Evaluate", "objhal": "[End of Question]", "hallusion": "\nYour output: "}
REPLIES = {"mmhal": rating_reply, "objhal": objhal_reply, "hallusion": lambda messages: "No"}


def _task_of(body: dict) -> str:
    text = "\n".join(str(m.get("content")) for m in body["messages"])
    hits = [task for task, mark in PROMPTS.items() if mark in text]
    assert len(hits) == 1, f"{hits} match the judge prompt {text[-200:]!r}"
    return hits[0]


def _reply(body: dict) -> str:
    return REPLIES[_task_of(body)](body["messages"])


def _summary(out) -> dict:
    return json.loads((out / "summary.json").read_text())


def _stored(store) -> int:
    return len(list((store / "metrics").glob("*.parquet"))) if (store / "metrics").is_dir() else 0


def _keys(out, task) -> list[str]:
    return [json.loads(line)["key"] for line in (out / task / "samples.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_judged_tasks_two_ranks(tiny_vlm_dir, world_dir, mmhal_data, amber_world, objhal_data,  # noqa: F811
                                hb_data, nltk_ready, tmp_path):  # noqa: F811
    pytest.importorskip("spacy")
    import nltk

    from tests.conftest import REPO, launch, run_cli

    (mm_data, mm_root), (hb_file, hb_root, _) = mmhal_data, hb_data
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "NLTK_DATA": ":".join(nltk.data.path)}
    mmhal = [f"mmhal.data={mm_data}", f"mmhal.image_root={mm_root}", "mmhal.n_boot=0"]
    common = [*mmhal, f"amber.data_root={amber_world}", f"amber.image_root={amber_world / 'image'}",
              f"amber.spacy_model={AMBER_PIPELINE}", "amber.n_boot=0",
              "--data-root", str(world_dir), f"objhal.data={objhal_data}",
              f"objhal.synonyms={OBJHAL_DATA / 'synonyms_refine.txt'}", f"objhal.spacy_model={OBJHAL_DATA / 'pipeline'}",
              f"objhal.cache_dir={tmp_path / 'gt'}", "objhal.n_boot=0",
              f"hallusion.data={hb_file}", f"hallusion.image_root={hb_root}", "hallusion.n_boot=0",
              "hallusion.mode=rule",
              # objhal judges only answers of more than 3 words
              "--batch-size", "1", "--max-new-tokens", "24", "--device", "cpu"]

    def run(fake, model, out, tasks, args, store="s2"):
        def cmd(port):
            return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
                    "-m", "evalsuite", "run", "--ckpt", str(tiny_vlm_dir), "--tasks", tasks, *args,
                    "--judge", fake.url, "--judge-model", model, "--store", str(tmp_path / store),
                    "--output", str(tmp_path / out)]
        return launch(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False)

    with FakeJudge(models=("judge-a", "judge-b"), reply_body=_reply) as fake:
        res = run(fake, "judge-a", "two", ",".join(TASKS), common)
        assert res.returncode == 0, res.stderr[-3000:]
        two = _summary(tmp_path / "two")
        assert _stored(tmp_path / "s2") == len(TASKS)
        # rank 0 alone asks: once per judged answer of each task (mmhal 4, not 8)
        asked = {task: sum(_task_of(r) == task for r in fake.requests) for task in PROMPTS}
        assert asked["mmhal"] == two["mmhal"]["extra"]["judged"] == 4, asked
        assert asked["objhal"] == two["objhal"]["extra"]["judged"] > 0, asked
        assert asked["hallusion"] == two["hallusion"]["extra"]["judged"], asked
        for task, ids in (("mmhal", range(4)), ("amber_g", range(1, 4)), ("amber_d", range(4, 22))):
            assert _keys(tmp_path / "two", task) == [str(i) for i in ids], task
        # amber's and hallusion's answers in the shared cache, mmhal's and objhal's each in its own: one file a rank
        own = tmp_path / "s2" / ".resume" / "own"
        for name in ("answers", "mmhal_answers", "objhal_answers"):
            assert sorted(p.name for p in own.glob(f"*/{name}.rank*.jsonl")) == [f"{name}.rank0.jsonl",
                                                                                  f"{name}.rank1.jsonl"]
        judged = (tmp_path / "s2" / ".resume" / "judge").glob("*/*.jsonl")
        assert sorted(p.name for p in judged) == [f"{task}.rank0.jsonl" for task in sorted(PROMPTS)]

        # one process, started as the ranks are (a fresh interpreter: the NLTK resources in objhal's identity
        # are the ones its search path finds, which a pytest worker's other tests may have extended)
        before = len(fake.requests)
        res = run_cli("run", "--ckpt", str(tiny_vlm_dir), "--tasks", ",".join(TASKS), *common, "--judge", fake.url,
                      "--judge-model", "judge-a", "--store", str(tmp_path / "s1"), "--output", str(tmp_path / "one"),
                      env=env, cwd=tmp_path)
        assert res.returncode == 0, res.stderr[-3000:]
        one = _summary(tmp_path / "one")
        assert {task: sum(_task_of(r) == task for r in fake.requests[before:]) for task in PROMPTS} == asked
        for task in TASKS:
            assert one[task]["eval_key"] == two[task]["eval_key"], (task, one[task]["identity"], two[task]["identity"])
            assert {(m["metric"], m["variant"]): m["value"] for m in one[task]["metrics"]} == \
                {(m["metric"], m["variant"]): m["value"] for m in two[task]["metrics"]}, task
            assert _keys(tmp_path / "one", task) == _keys(tmp_path / "two", task), task

        # a judge that ignores mmhal's format: both ranks fail with the same one line, nothing more stored
        fake.reply_body = lambda body: "no score"
        bad = run(fake, "judge-b", "bad", "mmhal", mmhal)
        assert bad.returncode == 1, bad.stderr[-3000:]
        lines = re.findall(r"evalsuite: failed: [^\n\r]*", bad.stderr)
        assert len(lines) == 2 and lines[0] == lines[1] and "mmhal: 4 of 4 judge replies" in lines[0], bad.stderr[-3000:]
        assert _stored(tmp_path / "s2") == len(TASKS)
