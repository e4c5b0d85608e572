"""evalsuite/lmms/judged.py without running lmms-eval: which tasks' scoring calls the network (read from
the installed lmms-eval's sources), the refusals, and the reply binding (cache, repeats, failures)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from evalsuite.errors import UserError
from evalsuite.judge.config import JudgeConfig
from evalsuite.lmms import judged
from tests.judge_fake import FakeJudge

TASKS = Path(importlib.util.find_spec("lmms_eval").origin).parent / "tasks"


def _cfg(process_results: str, *aggregations: str) -> dict:
    return {"process_results": process_results, "metric_list": [{"aggregation": a} for a in aggregations]}


def test_network_calls_read_from_the_scoring_modules():
    assert judged.network_calls(TASKS / "mmvet" / "mmvet.yaml", _cfg(
        "utils.mmvet_process_results", "utils.mmvet_aggregate_results")) == ["lmms_eval/tasks/mmvet/utils.py: llm_judge"]
    assert judged.network_calls(TASKS / "llava-bench-coco" / "llava-bench-coco.yaml", _cfg(
        "utils.llava_process_results")) == ["lmms_eval/tasks/llava-bench-coco/utils.py: OpenAIVerifier"]
    # evaluate_hb.py has no network call itself; the utils module it imports posts to OPENAI_API_URL
    assert judged.network_calls(TASKS / "hallusion_bench" / "hallusion_bench_image.yaml", _cfg(
        "evaluate_hb.hb_process_results", "evaluate_hb.hb_aggregation_result_aAcc")) == [
        "lmms_eval/tasks/hallusion_bench/utils.py: requests.post"]
    # rule-scored tasks, by relative or absolute `!function` names (evalsuite's own pope yaml)
    assert judged.network_calls(TASKS / "pope" / "pope.yaml", _cfg(
        "lmms_eval.tasks.pope.utils.pope_process_results", "utils.pope_aggregate_accuracy")) == []
    assert judged.network_calls(TASKS / "mme" / "mme.yaml", _cfg("utils.mme_process_results")) == []


def _leaf(name, network=("x.py: requests.post",)):
    return SimpleNamespace(name=name, lmms_task=name, network=list(network))


def test_check_leaves_refusals():
    judge = JudgeConfig(url="http://127.0.0.1:9/v1", model="m")
    assert judged.check_leaves([_leaf("pope", ())], None, 1) is False      # nothing judged: no judge needed
    assert judged.check_leaves([_leaf("mmvet"), _leaf("pope", ())], judge, 1) is True
    with pytest.raises(UserError, match=r"^--tasks mmvet: scored by lmms-eval with an LLM judge; give --judge"):
        judged.check_leaves([_leaf("mmvet")], JudgeConfig(), 1)
    with pytest.raises(UserError, match=r"^--tasks mmbench_en_dev: lmms-eval scores it by calling a model over the "
                                        r"network \(x.py: requests.post\), which evalsuite's --judge does not reach"):
        judged.check_leaves([_leaf("mmvet"), _leaf("mmbench_en_dev")], judge, 1)
    with pytest.raises(UserError, match="not run under torchrun"):
        judged.check_leaves([_leaf("llava_in_the_wild")], judge, 2)


def _judge(fake: FakeJudge, model="judge-a", retries=0):
    from evalsuite.judge.judge import Judge

    return Judge.resolve(JudgeConfig(url=fake.url, model=model, retries=retries), "test")


def test_binding_caches_replies_by_judge_and_request(tmp_path):
    body = {"messages": [{"role": "user", "content": "rate"}], "max_tokens": 128, "temperature": 0.0}
    with FakeJudge(models=("judge-a", "judge-b"), reply_body=lambda b: f"0.{len(b['messages'][0]['content'])}") as fake:
        with judged.bound(_judge(fake), tmp_path, "lmms-mmvet") as b:
            assert b.chat(body)["content"] == "0.4" and b.chat(body)["content"] == "0.4"
            assert b.chat({**body, "temperature": 0.5})["content"] == "0.4"    # another request: asked
            assert b.stats == {"asked": 2, "cached": 1} and len(fake.requests) == 2
        assert fake.requests[1]["temperature"] == 0.5 and fake.requests[0]["max_tokens"] == 128
        assert fake.requests[0]["model"] == "judge-a"
        with judged.bound(_judge(fake), tmp_path, "lmms-mmvet") as b:       # a rerun: from the cache file
            b.chat(body)
            assert b.stats == {"asked": 0, "cached": 1}
        with judged.bound(_judge(fake, "judge-b"), tmp_path, "lmms-mmvet") as b:   # another judge: asked
            b.chat(body)
            assert b.stats == {"asked": 1, "cached": 0} and fake.requests[-1]["model"] == "judge-b"


def test_binding_stops_endless_repeats_and_failures(tmp_path):
    body = {"messages": [{"role": "user", "content": "rate"}], "max_tokens": 128, "temperature": 0.0}
    with FakeJudge(reply_body=lambda b: "1.5") as fake:
        with judged.bound(_judge(fake), tmp_path, "lmms-mmvet") as b:
            for _ in range(judged.MAX_SAME_REQUEST):
                b.chat(body)
            with pytest.raises(judged.JudgeAbort, match=r"asked the judge the same request 20 times .*'1.5'"):
                b.chat(body)
            with pytest.raises(judged.JudgeAbort):   # and every request after it
                b.chat({**body, "temperature": 0.5})
        assert len(fake.requests) == 1
        fake.fail_first = 1
        with judged.bound(_judge(fake), tmp_path / "other", "lmms-mmvet") as b, \
                pytest.raises(judged.JudgeAbort, match=r"^lmms-mmvet: judge failed \(judge .*HTTP 500"):
            b.chat(body)
        assert not any((tmp_path / "other").rglob("*.jsonl")) or all(
            not p.read_text().strip() for p in (tmp_path / "other").rglob("*.jsonl"))
    assert issubclass(judged.JudgeAbort, BaseException) and not issubclass(judged.JudgeAbort, Exception)


def _post(url: str, body: dict) -> tuple[int, dict]:
    import json
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_endpoint_answers_through_the_bound_judge(tmp_path):
    """The chat-completions endpoint hallusion_bench's requests.post reaches (OPENAI_API_URL)."""
    endpoint = judged._Endpoint()
    body = {"model": "gpt-4", "messages": [{"role": "user", "content": "Prediction answer: yes"}], "max_tokens": 16}
    try:
        code, reply = _post(endpoint.url, body)
        assert code == 500 and "outside a judged run" in reply["error"]["message"]
        with FakeJudge(reply_body=lambda b: "correct") as fake:
            with judged.bound(_judge(fake), tmp_path, "lmms-hallusion_bench_image") as b:
                code, reply = _post(endpoint.url, body)
                assert code == 200 and reply["choices"][0]["message"]["content"] == "correct"
                assert reply["model"] == "judge-a" and b.stats == {"asked": 1, "cached": 0}
            # the task's model name is not sent on; no temperature in the request: none sent (server default)
            assert fake.requests[0]["model"] == "judge-a" and "temperature" not in fake.requests[0]
            assert fake.requests[0]["max_tokens"] == 16
            fake.fail_first = 1
            with judged.bound(_judge(fake), tmp_path / "other", "lmms-hallusion_bench_image") as b:
                code, reply = _post(endpoint.url, body)
                assert code == 500 and b.failure and "HTTP 500" in b.failure   # the runner raises it afterwards
    finally:
        endpoint.server.shutdown()
        endpoint.server.server_close()


def test_judge_section_read_by_lmms_eval_names_and_unused_judge_warns(caplog):
    from evalsuite.lmms.task import LmmsSpec, resolve_judge
    from evalsuite.run_config import sections_for

    assert "judge" in sections_for(["mmvet"]) and "judge" in sections_for(["scienceqa_full"])   # a group may hold one
    assert "judge" not in sections_for(["mme", "pope_full"])      # evalsuite's local lmms tasks: never judged
    spec = LmmsSpec("scienceqa_img", "scienceqa_img", "task", ["scienceqa_img"], [_leaf("scienceqa_img", ())])
    with caplog.at_level("WARNING"):
        assert resolve_judge([spec], JudgeConfig(url="http://127.0.0.1:9/v1", model="m")) is None
    assert "judge: no task of this run is scored by a judge (scienceqa_img)" in caplog.text
    caplog.clear()
    assert resolve_judge([spec], JudgeConfig(url="http://127.0.0.1:9/v1", model="m"), judge_elsewhere=True) is None
    assert resolve_judge([spec], JudgeConfig()) is None and not caplog.text
