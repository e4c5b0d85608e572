"""lmms-eval's judged tasks (mmvet, llava_in_the_wild, llava_bench_coco, hallusion_bench_image) through `evalsuite run` with evalsuite's judge: the
tiny kit VLM answers on local constructed data, tests/judge_fake.py answers the recorded replies of
tests/data/lmms_judge/cases.json, lmms-eval's own scoring turns them into numbers. The stored numbers
equal reference.json, written by lmms-eval's unmodified scoring functions on the same replies
(tests/data/lmms_judge/README.md). Also: the judge in the identity (reuse; another judge recomputes),
the reply cache (a rerun asks nothing), refusals before any model loads."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsuite.cli import main as cli_main
from tests.integration.test_lmms import _scratch_caches, _to_parquet  # noqa: F401
from tests.judge_fake import FakeJudge, canned_replies

DATA = Path(__file__).resolve().parents[1] / "data" / "lmms_judge"
CASES = json.loads((DATA / "cases.json").read_text())
REFERENCE = json.loads((DATA / "reference.json").read_text())
TASKS = ("mmvet", "llava_in_the_wild", "llava_bench_coco", "hallusion_bench_image")
# (unparsable, judged) per task on cases.json's replies: mmvet the empty reply (scored 0); llava_in_the_wild
# LW-4 and LW-6, llava_bench_coco LC-4 (scored [-1, -1]); hallusion_bench HB-4, the empty reply (scored unclear)
UNPARSABLE = {"mmvet": (1, 5), "llava_in_the_wild": (2, 6), "llava_bench_coco": (1, 4), "hallusion_bench_image": (1, 6)}
FIELDS = {"mmvet": ("question_id", "question", "answer", "capability"),
          "llava_in_the_wild": ("question_id", "question", "category", "gpt_answer", "caption"),
          "llava_bench_coco": ("question_id", "question", "category", "answer", "gpt_answer", "caption"),
          "hallusion_bench_image": ("category", "subcategory", "set_id", "figure_id", "visual_input", "question_id",
                                    "question", "gt_answer", "gt_answer_details")}


@pytest.fixture(scope="module")
def judged_data(tmp_path_factory) -> dict[str, Path]:
    """The judged tasks' parquet files with the hub datasets' columns (Image feature)."""
    import datasets
    from PIL import Image

    root = tmp_path_factory.mktemp("lmms-judged")
    out = {}
    for task, fields in FIELDS.items():
        rows = [{**{k: c[k] for k in fields}, "image": Image.new("RGB", (32, 32), (40 * i, 90, 200 - 30 * i))}
                for i, c in enumerate(CASES[task])]
        out[task] = root / f"{task}.parquet"
        _to_parquet(datasets, rows, out[task])
    return out


def _base(ckpt, data: dict, store: Path, out: Path, tasks=TASKS) -> list[str]:
    return ["run", "--ckpt", str(ckpt), "--tasks", ",".join(tasks), *(f"lmms.data.{t}={data[t]}" for t in tasks),
            "lmms.gen_kwargs=max_new_tokens=3", "lmms.bootstrap_iters=0", "--device", "cpu", "--store", str(store),
            "--output", str(out)]


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _values(entry: dict) -> dict:
    return {m["metric"]: m["value"] for m in entry["metrics"] if m.get("variant") is None}


def _skip_mmvet_backoff(monkeypatch) -> None:
    """mmvet's scoring sleeps 5 s before asking again after an unparsable reply (a rate-limit backoff): not
    here, where the judge answers at once; every other sleep is real."""
    import sys
    import time

    real = time.sleep

    def sleep(seconds):
        if not sys._getframe(1).f_code.co_filename.replace("\\", "/").endswith("lmms_eval/tasks/mmvet/utils.py"):
            real(seconds)

    monkeypatch.setattr(time, "sleep", sleep)


def test_judged_tasks_equal_lmms_evals_own_scoring(tiny_vlm_dir, judged_data, tmp_path, capsys, monkeypatch):
    store = tmp_path / "store"
    _skip_mmvet_backoff(monkeypatch)
    every = [c for task in TASKS for c in CASES[task]]
    with FakeJudge(models=("judge-a", "judge-b", "judge-c", "judge-d"), reply_body=canned_replies(every)) as fake:
        def run(out: str, model: str, *extra: str, tasks=TASKS) -> int:
            return cli_main([*_base(tiny_vlm_dir, judged_data, store, tmp_path / out, tasks), "--judge", fake.url,
                             "--judge-model", model, *extra])

        assert run("a", "judge-a") == 0
        a = _summary(tmp_path / "a")
        for task in TASKS:
            got = _values(a[task])
            rate = got.pop("unparsable_rate")
            want = {k: v for k, v in REFERENCE[task]["metrics"].items() if v is not None}
            assert got == pytest.approx(want), task   # lmms-eval's own numbers on the recorded replies
            # the replies lmms-eval's own rule could not read, counted beside them (none above half here)
            assert (a[task]["extra"]["unparsable"], a[task]["extra"]["judged"]) == UNPARSABLE[task], task
            assert rate == pytest.approx(UNPARSABLE[task][0] / UNPARSABLE[task][1])
            assert a[task]["identity"]["judge"]["model"] == "judge-a"
            assert a[task]["extra"]["judge"]["model"] == "judge-a"
        # lmms-eval's requests as its own provider sends them (mmvet: max_tokens 128, temperature 0.5 after
        # an unparsable reply); a repeated request is answered from the reply cache
        asked = [(b["messages"][-1]["content"], b.get("temperature"), b.get("max_tokens")) for b in fake.requests]
        want_asked = {(r["case"], r["temperature"], r["max_tokens"]) for t in TASKS for r in REFERENCE[t]["requests"]}
        got_asked = {(next(c["marker"] for c in every if c["marker"] in text), temp, mt) for text, temp, mt in asked}
        assert got_asked == want_asked and len(asked) == len(want_asked)
        assert all(b["model"] == "judge-a" for b in fake.requests)
        # per sample, lmms-eval's own process_results output (mmvet's score, llava's [reference, model] scores)
        assert {s["doc"]["question_id"]: s["gpt_eval_score"]["score"] for s in _samples(tmp_path / "a" / "mmvet")} \
            == {r["question_id"]: r["score"] for r in REFERENCE["mmvet"]["per_doc"]}
        for task in ("llava_in_the_wild", "llava_bench_coco"):
            assert {s["doc"]["question_id"]: s["gpt_eval_llava_all"]["scores"] for s in _samples(tmp_path / "a" / task)} \
                == {r["question_id"]: r["scores"] for r in REFERENCE[task]["per_doc"]}
        assert a["mmvet"]["extra"]["judge_replies"] == {"asked": 6, "cached": 3}   # 9 requests, 3 repeats
        # hallusion_bench's aggregation keeps its judgments in lmms-eval's --output_path: a fresh folder per run
        kept = json.loads((tmp_path / "a" / "lmms-eval" / "hallusion_bench_image" / "gpt_response" /
                           "hallusion_output_vd_model.json").read_text())
        assert [r["gpt4v_output_gpt_check"] for r in kept] == [
            r["gpt4v_output_gpt_check"] for r in REFERENCE["hallusion_bench_image"]["per_doc"][:4]]

        n = len(fake.requests)
        assert run("a2", "judge-a") == 0        # the same judge: served from the store, nothing asked
        assert all(_summary(tmp_path / "a2")[t].get("reused") for t in TASKS) and len(fake.requests) == n

        assert run("a3", "judge-a", "--rerun") == 0   # recomputed: every reply from the judge cache
        assert len(fake.requests) == n
        assert _summary(tmp_path / "a3")["mmvet"]["extra"]["judge_replies"]["asked"] == 0

        coco = ("llava_bench_coco",)
        assert run("b", "judge-b", tasks=coco) == 0      # another judge: another identity, asked again
        b = _summary(tmp_path / "b")["llava_bench_coco"]
        assert len(fake.requests) == n + len(CASES["llava_bench_coco"])
        assert b["eval_key"] != a["llava_bench_coco"]["eval_key"] and not b.get("reused")
        assert b["identity"]["judge"]["model"] == "judge-b"

        # a judge lmms-eval's rule cannot read (it would score every review [-1, -1]): more than half
        # unparsable fails in one line, naming the count, and stores nothing
        stored = sorted((store / "metrics").glob("*.parquet"))
        canned, fake.reply_body = fake.reply_body, (lambda body: '["dog", "rating: 4"]')
        capsys.readouterr()
        assert run("d", "judge-d", tasks=coco) == 1
        err = [line for line in capsys.readouterr().err.splitlines() if "unparsable" in line]
        assert len(err) == 1 and ("llava_bench_coco: 4 of 4 judge replies are unparsable by lmms-eval's rule (more "
                                  "than 50%" in err[0]) and "nothing stored" in err[0], err
        assert sorted((store / "metrics").glob("*.parquet")) == stored
        fake.reply_body = canned

        # a judge that fails for good: lmms-eval would score the failure 0; evalsuite fails in one line
        fake.fail_first = 1
        capsys.readouterr()
        assert run("c", "judge-c", "judge.retries=0") == 1
        err = capsys.readouterr().err
        assert "mmvet: judge failed (judge " in err and "HTTP 500" in err and "nothing of mmvet is stored" in err
        assert sorted((store / "metrics").glob("*.parquet")) == stored
        assert not (tmp_path / "c" / "summary.json").exists() or "mmvet" not in _summary(tmp_path / "c")


def _samples(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines() if line.strip()]


def test_judged_task_refusals_before_the_model_loads(tiny_vlm_dir, judged_data, tmp_path, capsys):
    store, out = tmp_path / "store", tmp_path / "out"
    capsys.readouterr()
    assert cli_main(_base(tiny_vlm_dir, judged_data, store, out)) == 2     # no --judge: would call api.openai.com
    err = capsys.readouterr().err.strip().splitlines()
    assert any(f"--tasks {', '.join(TASKS)}: scored by lmms-eval with an LLM judge; give --judge" in line
               for line in err), err
    data = {"mmbench_en_dev": judged_data["mmvet"]}    # its scoring asks GPT to match options, by itself
    assert cli_main(_base(tiny_vlm_dir, data, store, out, ("mmbench_en_dev",))) == 2
    err = capsys.readouterr().err
    assert ("--tasks mmbench_en_dev: lmms-eval scores it by calling a model over the network "
            "(lmms_eval/tasks/mmbench/en_utils.py: OPENAI_API), which evalsuite's --judge does not reach; refused") in err
    assert not (store / ".resume" / "lmms").exists() and not (store / "metrics").exists()
