"""`evalsuite run --tasks objhal` end to end (in process): the tiny kit VLM answers prompts about the synthetic
world's images (inline base64, RLAIF-V's prompt file format), a fake OpenAI-compatible judge (tests/judge_fake.py)
lists objects. Stored with the judge and the spaCy pipeline in the identity; a second run is served from the
store; `objhal.extractor=chair` is another identity and needs no judge; a judge that ignores the format fails in
one line and stores nothing; bad prompt lines are one line naming the file, line and field.
Under two ranks: tests/integration/test_judged_two_ranks.py."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from evalsuite.cli import main as cli_main
from tests.judge_fake import FakeJudge

DATA = Path(__file__).resolve().parents[1] / "data" / "objhal"
QUESTION = "Describe this image in detail."


@pytest.fixture(scope="module")
def objhal_data(world_dir, tmp_path_factory) -> Path:
    """5 prompts over the world's val images, each image inline as base64 (the released file's fields)."""
    coco = json.loads((world_dir / "annotations" / "instances_val.json").read_text())
    images = sorted(coco["images"], key=lambda im: im["id"])[:5]
    lines = [{"image_id": im["id"] if i % 2 else str(im["id"]), "question": QUESTION,
              "image": base64.b64encode((world_dir / "images" / "val" / im["file_name"]).read_bytes()).decode()}
             for i, im in enumerate(images)]
    path = tmp_path_factory.mktemp("objhal") / "obj_halbench_300_with_image.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _stored(store: Path) -> int:
    return len(list((store / "metrics").glob("*.parquet"))) if (store / "metrics").is_dir() else 0


def _reply(messages: list[dict]) -> str:
    """A judge listing a dog, a cat and a person for every answer; its request is the released prompt."""
    return '["dog", "black cat", "men"]'


def test_objhal_run_reuse_chair_variant_and_unparsable(tiny_vlm_dir, world_dir, objhal_data, tmp_path, capsys):
    pytest.importorskip("spacy")
    store = tmp_path / "store"

    def run(out: str, *extra: str, synonyms: bool = True) -> int:
        return cli_main(["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "objhal", "--data-root", str(world_dir),
                         f"objhal.data={objhal_data}", *([f"objhal.synonyms={DATA / 'synonyms_refine.txt'}"] * synonyms),
                         "objhal.n_boot=0", f"objhal.cache_dir={tmp_path / 'gt'}", "--max-new-tokens", "24", "--device", "cpu", "--store", str(store),
                         "--output", str(tmp_path / out), *extra])

    judged = [f"objhal.spacy_model={DATA / 'pipeline'}", "judge.max_concurrency=2", "judge.retries=0"]
    with FakeJudge(models=("judge-a", "judge-b"), reply=_reply) as fake:
        assert run("a1", *judged, "--judge", fake.url, "--judge-model", "judge-a") == 0
        a1 = _summary(tmp_path / "a1")["objhal"]
        ident, extra = a1["identity"], a1["extra"]
        assert ident["judge"]["model"] == "judge-a" and ident["judge"]["prompt"] == "objhal-rlaif-v-1"
        assert ident["spacy"]["pipeline"] == "en_core_web_trf" and ident["extractor"] == "judge"
        asked = extra["judged"]
        assert len(fake.requests) == asked and asked + extra["short_answers"] == 5 and extra["unparsable"] == 0
        assert asked > 0, "the tiny model's answers are all 3 words or fewer: nothing was judged"
        sent = fake.requests[0]["messages"]
        assert len(sent) == 1 and sent[0]["role"] == "system"
        assert f"<image> {QUESTION}\n\n[End of Question]" in sent[0]["content"]
        metrics = {m["metric"]: m["value"] for m in a1["metrics"]}
        # every judged answer names dog, cat and person ("black cat" -> cat, "men" -> man -> person)
        assert set(metrics) >= {"CHAIRs_refine", "CHAIRi", "correct_rate", "object_correct_rate", "obj_rec", "avg_len"}
        assert metrics["correct_rate"] == pytest.approx(100 - metrics["CHAIRs_refine"])
        assert metrics["object_correct_rate"] == pytest.approx(100 - metrics["CHAIRi"])
        assert extra["overall"]["mention_count"] == 3 * asked
        cached = list((tmp_path / "gt").glob("objhal_gt_*.json"))
        assert len(cached) == 1 and set(json.loads(cached[0].read_text())["known"]) == \
            {int(json.loads(x)["image_id"]) for x in objhal_data.read_text().splitlines()}

        # without objhal.synonyms: evalsuite's copy of the released file, the same content, so the same result
        assert run("a2", *judged, "--judge", fake.url, "--judge-model", "judge-a", synonyms=False) == 0
        assert _summary(tmp_path / "a2")["objhal"]["reused"] and len(fake.requests) == asked and _stored(store) == 1

        # the judge-free variant: another identity, no judge asked, not the published protocol
        assert run("c", "objhal.extractor=chair") == 0
        c = _summary(tmp_path / "c")["objhal"]
        assert c["eval_key"] != a1["eval_key"] and "judge" not in c["identity"] and len(fake.requests) == asked
        assert c["extra"]["published_protocol"] is False and _stored(store) == 2
        assert len(list((tmp_path / "gt").glob("objhal_gt_*.json"))) == 1    # the same ground truth, cached

        # a judge that answers prose: every judged reply unparsable, one line, nothing stored
        fake.reply = lambda messages: "I see a dog and a cat."
        capsys.readouterr()
        assert run("b", *judged, "--judge", fake.url, "--judge-model", "judge-b") == 1
        err = capsys.readouterr().err
        assert f"objhal: {asked} of {asked} judge replies are no JSON list of objects" in err and "nothing stored" in err
        assert _stored(store) == 2


def test_objhal_refusals_before_generation(tiny_vlm_dir, world_dir, objhal_data, tmp_path, capsys):
    base = ["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "objhal", "--data-root", str(world_dir), "--device", "cpu",
            "--store", str(tmp_path / "store"), "objhal.extractor=chair"]
    syn = f"objhal.synonyms={DATA / 'synonyms_refine.txt'}"
    good = objhal_data.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    cases = [
        ([syn], "objhal.data: not given (task objhal needs it); pass objhal.data=FILE: RLAIF-V's Object HalBench"),
        ([f"objhal.data={objhal_data}", f"objhal.synonyms={tmp_path / 'none.txt'}"], "objhal.synonyms"),
        ([syn, f"objhal.data={objhal_data}", "objhal.spacy_model=x"], "only read with objhal.extractor=judge"),
        ([syn, f"objhal.data={objhal_data}", "--judge", "http://127.0.0.1:9/v1", "--judge-model", "x"],
         "--judge: judge.url: no task of this run reads the judge section"),     # extractor chair asks no judge
        ([syn, f"objhal.data={bad}"], f"{bad}:2: field 'image' is not valid base64",
         [good[0], json.dumps({**json.loads(good[1]), "image": "@@not base64"})]),
        ([syn, f"objhal.data={bad}"], f"{bad}:1: field 'question' missing",
         [json.dumps({**json.loads(good[0]), "question": ""})]),
        ([syn, f"objhal.data={bad}"], f"{bad}:1: field 'image_id' missing",
         [json.dumps({**json.loads(good[0]), "image_id": "12a"})]),
        ([syn, f"objhal.data={bad}"], f"{bad}:1: field 'image': image unreadable",
         [json.dumps({**json.loads(good[0]), "image": base64.b64encode(b"not an image").decode()})]),
        ([syn, f"objhal.data={bad}"], f"{bad}:1: image_id 987654321 is in no annotation file",
         [json.dumps({**json.loads(good[0]), "image_id": 987654321})]),
    ]
    for case in cases:
        extra, msg = case[0], case[1]
        if len(case) > 2:
            bad.write_text("\n".join(case[2]) + "\n")
        capsys.readouterr()
        assert cli_main([*base, *extra]) == 2, msg
        err = capsys.readouterr().err.strip().splitlines()
        assert any(msg in line for line in err), (msg, err)
    capsys.readouterr()
    judged = [*base[:-1], syn, f"objhal.data={objhal_data}"]
    assert cli_main(judged) == 2
    assert "objhal: needs a judge" in capsys.readouterr().err
    with FakeJudge() as fake:
        assert cli_main([*judged, "--judge", fake.url, "--judge-model", "judge-a",
                         "objhal.spacy_model=no_such_pipeline_xyz"]) == 2
        assert "objhal.spacy_model: 'no_such_pipeline_xyz' is neither an installed spaCy pipeline nor a directory" \
            in capsys.readouterr().err
        assert not fake.requests
    assert not (tmp_path / "store" / "metrics").exists()
