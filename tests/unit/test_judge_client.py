"""The judge client against a fake OpenAI-compatible server (tests/judge_fake.py): judgments, the
concurrency bound, retries, timeouts, an oversized reply, a server that is down; the reply cache."""
from __future__ import annotations

import json

import pytest

from evalsuite.errors import UserError
from evalsuite.judge.client import MAX_REPLY_BYTES, ChatClient, JudgeError
from evalsuite.judge.config import JudgeConfig
from evalsuite.judge.judge import Judge
from evalsuite.judge.server import free_port
from tests.judge_fake import FakeJudge


def _msgs(i: int) -> list[dict]:
    return [{"role": "user", "content": f"question {i}\n### LMM Response to Evaluate\n" + "w " * i}]


def _judge(fake: FakeJudge, **kw) -> Judge:
    cfg = JudgeConfig(model="judge-a", url=fake.url, **kw)
    return Judge.resolve(cfg, "test")


def test_judgments_in_order_and_cached(tmp_path):
    with FakeJudge() as fake:
        judge = _judge(fake, max_concurrency=3)
        reqs = [_msgs(i) for i in range(10)]
        got = judge.ask(reqs, tmp_path, "t", "p1", None)
        assert [r["content"].split("Rating: ")[1] for r in got] == [str(i % 7) for i in range(10)]
        assert all(r["model"] == "judge-a" for r in got)
        assert fake.requests[0]["temperature"] == 0.0 and fake.requests[0]["max_tokens"] == 1024
        assert len(fake.requests) == 10
        again = judge.ask(reqs, tmp_path, "t", "p1", None)
        assert again == got and len(fake.requests) == 10 and judge.stats == {"asked": 0, "cached": 10}
        # another prompt version is another key: asked again
        judge.ask(reqs[:2], tmp_path, "t", "p2", None)
        assert len(fake.requests) == 12


def test_concurrency_bound():
    with FakeJudge(delay_s=0.15) as fake:
        judge = _judge(fake, max_concurrency=2)
        judge.ask([_msgs(i) for i in range(8)], None, "t", "p", None)
        assert fake.max_in_flight == 2


def test_http_500_then_success():
    with FakeJudge(fail_first=2) as fake:
        client = ChatClient(fake.url, retries=2, backoff_s=0.01)
        assert client.chat("judge-a", _msgs(3), 0.0, 16)["content"].endswith("Rating: 3")
        assert len(fake.requests) == 3


def test_http_500_bounded_retries(tmp_path):
    with FakeJudge(fail_first=100) as fake:
        judge = _judge(fake, retries=2)
        judge.config.retries = 2
        with pytest.raises(JudgeError) as e:
            Judge(judge.config, judge.identity).ask([_msgs(1)], tmp_path, "t", "p", None)
        assert "HTTP 500 (3 attempts)" in str(e.value) and "\n" not in str(e.value)
        assert len(fake.requests) == 3
    assert not list(tmp_path.rglob("*.jsonl"))   # nothing stored for a failed request


def test_timeout_is_retried_then_one_line():
    with FakeJudge(delay_s=1.0) as fake:
        client = ChatClient(fake.url, timeout_s=0.2, retries=1, backoff_s=0.01)
        with pytest.raises(JudgeError) as e:
            client.chat("judge-a", _msgs(1), 0.0, 16)
        assert "(2 attempts)" in str(e.value) and "timed out" in str(e.value).lower()
        assert len(fake.requests) == 2


def test_huge_reply_refused_once():
    with FakeJudge(huge_bytes=10 * MAX_REPLY_BYTES) as fake:
        client = ChatClient(fake.url, retries=3, backoff_s=0.01)
        with pytest.raises(JudgeError, match="reply larger than 1 MB"):
            client.chat("judge-a", _msgs(1), 0.0, 16)
        assert len(fake.requests) == 1   # deterministic: not retried


def test_first_failure_stops_and_keeps_finished_replies(tmp_path):
    calls = []

    def reply(messages):
        calls.append(1)
        if "question 5" in messages[0]["content"]:
            return None   # not text: a malformed completion
        return "ok Rating: 5"

    with FakeJudge(reply=reply) as fake:
        judge = _judge(fake, max_concurrency=1)
        with pytest.raises(JudgeError, match="content is NoneType"):
            judge.ask([_msgs(i) for i in range(10)], tmp_path, "t", "p", None)
        lines = [json.loads(x) for f in tmp_path.rglob("*.jsonl") for x in f.read_text().splitlines()]
        assert sorted(r["doc_id"] for r in lines) == [0, 1, 2, 3, 4]   # whole replies only, none after
        fake.reply = lambda m: "ok Rating: 5"
        got = judge.ask([_msgs(i) for i in range(10)], tmp_path, "t", "p", None)
        assert judge.stats == {"asked": 5, "cached": 5} and len(got) == 10


def test_server_down_is_one_line_before_anything():
    port = free_port()
    with pytest.raises(UserError) as e:
        Judge.resolve(JudgeConfig(model="m", url=f"http://127.0.0.1:{port}/v1", retries=1), "mmhal")
    msg = str(e.value)
    assert msg.startswith(f"--judge http://127.0.0.1:{port}/v1: server unreachable") and "\n" not in msg


def test_url_identity_and_refusals(monkeypatch):
    with FakeJudge(models=("judge-a", "judge-b")) as fake:
        a = _judge(fake)
        assert a.identity == {"kind": "server", "model": "judge-a", "served": {"id": "judge-a", "root": "/models/judge-a"},
                              "temperature": 0.0, "max_tokens": 1024}
        b = Judge.resolve(JudgeConfig(model="judge-b", url=fake.url), "t")
        assert a.key("v1") != b.key("v1") and a.key("v1") != a.key("v2")
        assert _judge(fake, temperature=0.5).key("v1") != a.key("v1")
        assert _judge(fake, max_concurrency=1, retries=0).key("v1") == a.key("v1")
        with pytest.raises(UserError, match="--judge-model judge-c: not served by .* judge-a, judge-b"):
            Judge.resolve(JudgeConfig(model="judge-c", url=fake.url), "t")
        with pytest.raises(UserError, match="--judge-model: required"):
            Judge.resolve(JudgeConfig(url=fake.url), "t")
        # the key goes in the header only
        monkeypatch.setenv("EVALSUITE_JUDGE_API_KEY", "sk-secret")
        j = _judge(fake)
        j.ask([_msgs(1)], None, "t", "p", None)
        assert fake.auth[-1] == "Bearer sk-secret"
        assert "sk-secret" not in json.dumps(j.identity) + json.dumps(j.describe())


def test_no_judge_and_bad_config():
    with pytest.raises(UserError, match="mmhal: needs a judge: --judge MODEL_DIR"):
        Judge.resolve(JudgeConfig(), "mmhal")
    with pytest.raises(UserError, match="judge.url: 'ftp://x' is not an http"):
        JudgeConfig(url="ftp://x")
    with pytest.raises(UserError, match="judge.max_concurrency: must be >= 1"):
        JudgeConfig(max_concurrency=0)
    with pytest.raises(UserError, match="judge.temperature: must be >= 0"):
        JudgeConfig(temperature=-1)


def test_config_fields_have_help():
    import dataclasses

    assert all(f.metadata.get("help") for f in dataclasses.fields(JudgeConfig))


def test_interrupt_starts_nothing_more():
    """Ctrl-C (or SIGTERM's SystemExit) while judging: the queued requests are not sent."""
    import time

    from evalsuite.judge.client import map_chat

    calls = []

    def fn(i):
        calls.append(i)
        time.sleep(0.05)
        return {"content": "x"}

    def done(i, reply):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        map_chat(fn, 50, 2, done)
    assert len(calls) <= 4


def test_describe_drops_credentials_from_the_url():
    with FakeJudge() as fake:
        url = fake.url.replace("http://", "http://user:pw@") + "?key=sk-1"
        j = Judge.resolve(JudgeConfig(model="judge-a", url=fake.url), "t")
        j.config.url = url
        shown = json.dumps(j.describe())
        assert "pw" not in shown and "sk-1" not in shown and f"127.0.0.1:{fake.port}/v1" in shown
