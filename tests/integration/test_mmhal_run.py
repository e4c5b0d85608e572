"""`evalsuite run --tasks mmhal` end to end (in process): the tiny kit VLM answers, a fake OpenAI-compatible
judge (tests/judge_fake.py) judges. Stored with the judge in the identity; a second run is served from the
store; another judge model recomputes (the answers from the resume cache); a run stopped mid-judging
stores nothing and resumes with the judgments it had; a judge that ignores the format fails in one line.
Under two ranks: tests/integration/test_judged_two_ranks.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsuite.cli import main as cli_main
from tests.judge_fake import FakeJudge

TYPES = ["attribute", "adversarial", "comparison", "counting"]


@pytest.fixture
def mmhal_data(world_dir, tmp_path) -> tuple[Path, Path]:
    """A 4-record response_template.json over the world's val images (the released fields)."""
    coco = json.loads(next((world_dir / "annotations").glob("instances_val*.json")).read_text())
    images = sorted(coco["images"], key=lambda im: im["id"])[:4]
    root = next(p.parent for p in world_dir.rglob(images[0]["file_name"]))
    records = [{"question_type": t, "question_topic": "outdoor", "image_id": f"{im['id']:016x}",
                "image_src": f"https://example.org/x/{im['file_name']}", "image_content": ["Cat", "Table"],
                "question": f"What is in image {i}?", "gt_answer": "A cat on a table.", "model_answer": ""}
               for i, (t, im) in enumerate(zip(TYPES, images))]
    data = tmp_path / "response_template.json"
    data.write_text(json.dumps(records))
    return data, root


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _stored(store: Path) -> int:
    return len(list((store / "metrics").glob("*.parquet"))) if (store / "metrics").is_dir() else 0


def test_mmhal_run_store_reuse_other_judge_resume(tiny_vlm_dir, mmhal_data, tmp_path, capsys):
    data, root = mmhal_data
    store = tmp_path / "store"

    def run(out: str, model: str, *extra: str) -> int:
        return cli_main(["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "mmhal", f"mmhal.data={data}",
                         f"mmhal.image_root={root}", "mmhal.n_boot=0", "--judge", fake.url, "--judge-model", model,
                         "judge.max_concurrency=1", "judge.retries=0", "--max-new-tokens", "3", "--device", "cpu",
                         "--store", str(store), "--output", str(tmp_path / out), *extra])

    with FakeJudge(models=("judge-a", "judge-b", "judge-c", "judge-d")) as fake:
        assert run("a1", "judge-a") == 0
        a1 = _summary(tmp_path / "a1")["mmhal"]
        assert len(fake.requests) == 4 and _stored(store) == 1
        assert a1["identity"]["judge"]["model"] == "judge-a" and a1["identity"]["judge"]["prompt"]
        assert a1["extra"]["judge"]["model"] == "judge-a" and a1["extra"]["unparsable"] == 0
        metrics = {(m["metric"], m["variant"]): m["value"] for m in a1["metrics"]}
        # the fake rates by the answer's word count mod 7 (tests/judge_fake.py)
        sent = [r["messages"][0]["content"] for r in fake.requests]
        assert all("### Standard Human-Generated Answer\nA cat on a table.\n" in s for s in sent)
        ratings = [len(s.rsplit("### LMM Response to Evaluate", 1)[1].split()) % 7 for s in sent]
        assert metrics[("score", None)] == pytest.approx(sum(ratings) / 4)
        assert {v for (m, v) in metrics if m == "score"} == {None, *TYPES}
        assert metrics[("hallucination_rate", None)] == pytest.approx(sum(r < 3 for r in ratings) / 4)

        assert run("a2", "judge-a") == 0     # served from the store: the judge is not asked
        assert _summary(tmp_path / "a2")["mmhal"]["reused"] and len(fake.requests) == 4 and _stored(store) == 1

        assert run("b", "judge-b") == 0      # another judge: another identity, judged again
        b = _summary(tmp_path / "b")["mmhal"]
        assert b["eval_key"] != a1["eval_key"] and len(fake.requests) == 8 and _stored(store) == 2

        # judge-c fails after two replies: nothing stored; the rerun asks only for the other two
        fake.fail_first = 0
        real = fake.reply
        calls = {"n": 0}

        def flaky(messages):
            calls["n"] += 1
            if calls["n"] > 2:
                raise RuntimeError("judge crashed")
            return real(messages)

        fake.reply = flaky
        assert run("c1", "judge-c") == 1
        assert _stored(store) == 2 and "mmhal" not in (_summary(tmp_path / "c1") if (tmp_path / "c1" / "summary.json").exists() else {})
        fake.reply = real
        before = len(fake.requests)
        assert run("c2", "judge-c") == 0
        assert len(fake.requests) - before == 2 and _stored(store) == 3
        c2 = _summary(tmp_path / "c2")["mmhal"]
        assert c2["extra"]["judge_requests"] == {"asked": 2, "cached": 2}

        # a judge that never gives a rating: more than half unparsable, one line, nothing stored
        fake.reply = lambda messages: "I cannot rate this."
        capsys.readouterr()
        assert run("d", "judge-d") == 1
        err = capsys.readouterr().err
        assert "mmhal: 4 of 4 judge replies have no single 'rating: N'" in err and "nothing stored" in err
        assert _stored(store) == 3


def test_mmhal_refusals_before_generation(tiny_vlm_dir, mmhal_data, tmp_path, capsys):
    data, root = mmhal_data
    from evalsuite.judge.server import free_port

    base = ["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "mmhal", f"mmhal.data={data}", f"mmhal.image_root={root}",
            "--device", "cpu", "--store", str(tmp_path / "store")]
    cases = [
        ([], "mmhal: needs a judge: --judge MODEL_DIR"),
        (["--judge", f"http://127.0.0.1:{free_port()}/v1", "--judge-model", "x", "judge.retries=0"],
         "server unreachable"),
        (["--judge", str(tmp_path)], "no config.json; not a servable model directory"),
        (["--judge", str(tiny_vlm_dir / "nope")], "no such directory"),
    ]
    for extra, msg in cases:
        capsys.readouterr()
        assert cli_main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert any(msg in line for line in err), (msg, err)
    (tmp_path / "bad.json").write_text(json.dumps([{"question": "q"}]))
    assert cli_main([*base[:5], f"mmhal.data={tmp_path / 'bad.json'}", f"mmhal.image_root={root}", "--judge",
                     "http://127.0.0.1:9/v1", "--judge-model", "x"]) == 2
    assert "record 0: field 'question_type' missing" in capsys.readouterr().err
    assert not (tmp_path / "store" / "metrics").exists()


def test_mmhal_killed_while_judging_resumes(tiny_vlm_dir, mmhal_data, tmp_path):
    """kill -9 of `evalsuite run` after two judgments: nothing stored; the same command asks only the rest."""
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import REPO, cli_inprocess

    data, root = mmhal_data
    store = tmp_path / "store"
    argv = [sys.executable, "-m", "evalsuite.cli", "run", "--ckpt", str(tiny_vlm_dir), "--tasks", "mmhal",
            f"mmhal.data={data}", f"mmhal.image_root={root}", "mmhal.n_boot=0", "judge.max_concurrency=1",
            "--max-new-tokens", "3", "--device", "cpu", "--store", str(store), "--output", str(tmp_path / "out")]

    def cached() -> int:
        return sum(len(f.read_text().splitlines()) for f in (store / ".resume" / "judge").rglob("mmhal.rank0.jsonl")) \
            if (store / ".resume" / "judge").is_dir() else 0

    with FakeJudge(delay_s=1.5) as fake:
        argv += ["--judge", fake.url, "--judge-model", "judge-a"]
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        t0 = time.monotonic()
        while cached() < 2 and proc.poll() is None and time.monotonic() - t0 < 300:
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
        done = cached()
        assert 2 <= done < 4 and _stored(store) == 0
        fake.delay_s = 0
        asked = len(fake.requests)
        # the same command again, in this process (conftest.cli_inprocess: a second interpreter's imports saved)
        res = cli_inprocess(*argv[3:])
        assert res.returncode == 0, res.stderr[-2000:]
        assert len(fake.requests) - asked == 4 - done and _stored(store) == 1
        assert _summary(tmp_path / "out")["mmhal"]["extra"]["judge_requests"] == {"asked": 4 - done, "cached": done}


def test_csr_loop_eval_section_runs_mmhal_with_its_judge(tiny_vlm_dir, mmhal_data, tmp_path):
    """The CSR loop's coupled evaluation (training/csr/loop.py stage_eval, as for the base and every
    iteration) with `eval: {tasks: [mmhal], judge: ..., mmhal: ...}`: judged by the eval section's judge,
    stored with it in the identity under the loop's label and store; the next checkpoint's evaluation of
    the same weights is served from the store without asking the judge."""
    from training.csr.config import load_config
    from training.csr.loop import stage_eval

    data, root = mmhal_data
    configs = Path(__file__).resolve().parents[2] / "configs"
    with FakeJudge(models=("judge-a",)) as fake:
        cfg = load_config(configs / "csr_tiny.yaml", [
            f"model={tiny_vlm_dir}", f"store={tmp_path / 'store'}", f"output_dir={tmp_path / 'run'}",
            "eval.tasks=[mmhal]", f"eval.judge.url={fake.url}", "eval.judge.model=judge-a",
            "eval.judge.retries=0", f"eval.mmhal.data={data}", f"eval.mmhal.image_root={root}", "eval.mmhal.n_boot=0",
            "eval.gen.max_new_tokens=3"])
        stage_eval(cfg, str(tiny_vlm_dir), "csr_tiny/base", tmp_path / "run" / "base_eval")
        got = _summary(tmp_path / "run" / "base_eval")["mmhal"]
        assert len(fake.requests) == 4 and _stored(tmp_path / "store") == 1
        assert got["identity"]["judge"]["model"] == "judge-a" and got["extra"]["judged"] == 4
        assert all(r["model"] == "judge-a" and r["max_tokens"] == cfg.eval.judge.max_tokens for r in fake.requests)
        stage_eval(cfg, str(tiny_vlm_dir), "csr_tiny/again", tmp_path / "run" / "again")
        assert _summary(tmp_path / "run" / "again")["mmhal"]["reused"] and len(fake.requests) == 4
