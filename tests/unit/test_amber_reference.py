"""amber_g / amber_d equal the released AMBER inference.py, run unmodified on the same files with the same
spaCy vectors (tests/data/amber/README.md: how the reference outputs were made)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.test_amber import nltk_ready  # noqa: F401  (fixture)

DATA = Path(__file__).resolve().parents[1] / "data" / "amber"
SECTIONS = {"Generative Task": "generative", "Descriminative Task": "discriminative", "Exsitence": "existence",
            "Attribute": "attribute", "State": "state", "Number": "number", "Action": "action",
            "Relation": "relation"}


def printed(path: Path) -> dict:
    """The released script's stdout as {section: {metric: value}}."""
    out: dict = {}
    section = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        name, _, value = line.partition(":")
        if not value.strip():
            section = out.setdefault(SECTIONS[name], {})
        else:
            section[name] = float(value)
    return out


@pytest.fixture(scope="module")
def scored(nltk_ready):  # noqa: F811
    from evalsuite.metrics import amber

    data = amber.load_data(DATA, tuple(amber.FILES))
    amber.check_queries(data, "query_generative", True)
    amber.check_queries(data, "query_discriminative", False)
    nlp = amber.load_pipeline(str(DATA / "pipeline"))
    scorer = amber.GenerativeScorer(data, amber.Similarity(nlp), 0.8)
    gen, disc = {}, {}
    for row in json.loads((DATA / "inference_a.json").read_text()):
        entry = data.entry(row["id"], "t")
        if entry["type"] == "generative":
            gen[row["id"]] = scorer.score(row["response"], entry)
        else:
            disc[row["id"]] = amber.score_discriminative(row["response"], entry, "released")
    return data, nlp, gen, disc


def test_reference_covers_every_dimension():
    ref = printed(DATA / "reference_a.txt")
    assert set(ref) == set(SECTIONS.values())
    assert all(len(v) == 4 for v in ref.values())


@pytest.mark.parametrize("kind", ["a", "g", "d"])
def test_equals_released_script(scored, kind):
    from evalsuite.metrics import amber

    data, _, gen, disc = scored
    ours = amber.released_table(list(gen.values()) if kind in "ag" else None,
                                list(disc.values()) if kind in "ad" else None, data.start)
    assert ours == printed(DATA / f"reference_{kind}.txt")


@pytest.mark.parametrize("qid", [1, 2, 3, 4, 5, 6])
def test_each_response_equals_released_script(scored, qid):
    from evalsuite.metrics import amber

    data, _, gen, _ = scored
    assert amber.released_table([gen[qid]], None, data.start) == printed(DATA / f"reference_g_{qid}.txt")


def test_rules_near_the_threshold_are_exercised(scored):
    """The constructed vectors put pairs just above and below 0.8, and the responses use them where the
    difference shows in the released numbers (the per-response references above)."""
    from evalsuite.metrics.amber import Similarity

    _, nlp, gen, _ = scored
    sim = Similarity(nlp)
    assert sim("pigeon", "bird") > 0.8 > sim("duck", "bird")
    assert sim("eagle", "bird") > 0.8 > sim("goose", "bird")
    assert sim("football", "ball") < 0.8 < sim("river", "lake")
    assert sim("kite", "bird") == 0.0          # a word without a vector
    words = lambda pairs: [w for w, _ in pairs]
    # goose (0.795) marks no bird, sand (0.79) is hallucinated, river (0.81) covers lake, flower (0.81) grass
    assert "bird" not in gen[1]["cognitive"] and {"goose", "sand"} <= set(words(gen[1]["hallucinated"]))
    assert ["river", "lake"] in gen[1]["mentions"] and ["flower", "grass"] in gen[1]["mentions"]
    assert "bird" in gen[2]["cognitive"] and "bird" in gen[4]["cognitive"]      # pigeon 0.8001, eagle 0.805
    assert "bird" not in gen[5]["cognitive"] and "football" in words(gen[5]["hallucinated"])   # duck, football
    # ground covers road (an associated word of road comes before the object ground); sign is a safe word
    assert ["ground", "road"] in gen[4]["mentions"] and "ground" not in gen[4]["covered"]
    assert ["sign", "sign"] in gen[4]["mentions"] and "sign" not in words(gen[4]["hallucinated"])
    assert gen[6]["mentions"] == []            # the empty response


def test_tasks_store_the_released_numbers(scored, tmp_path, monkeypatch):
    """amber_g then amber_d through the tasks' plan/run with the reference responses as the answers: every
    stored value is the released printout, the AMBER score (100 - CHAIR + F1) / 2 comes with amber_d, and
    each per-sample row is kept for the CIs."""
    from evalsuite.gen_settings import GenConfig
    from evalsuite.tasks import amber as task_mod
    from evalsuite.tasks import answers as answers_mod
    from evalsuite.tasks.base import RunContext

    responses = {r["id"]: r["response"] for r in json.loads((DATA / "inference_a.json").read_text())}
    images = tmp_path / "images"
    images.mkdir()
    for name in ("query_generative", "query_discriminative"):
        for q in json.loads((DATA / f"data/query/{name}.json").read_text()):
            (images / q["image"]).touch()

    def fake_answers(ctx, items, gen, data_id, task, namespace="answers"):
        return [{"key": str(it["id"]), "image_id": it["id"], "image": it["path"], "prompt": it["prompt"],
                 "answer": responses[it["id"]]} for it in items]

    monkeypatch.setattr(answers_mod, "answer_items", fake_answers)
    ctx = RunContext(ckpt=str(tmp_path), data_root=None, output_dir=tmp_path, gen=GenConfig(max_new_tokens=8),
                     device="cpu", ckpt_id="ck")
    opts = task_mod.AmberOptions(data_root=str(DATA), image_root=str(images), spacy_model=str(DATA / "pipeline"),
                                 n_boot=50)
    g_task, d_task = task_mod.AmberGenerativeTask(), task_mod.AmberDiscriminativeTask()
    g_plan = g_task.plan(ctx, opts, {})
    assert d_task.requires(opts, ["amber_g", "amber_d"]) == ("amber_g",)
    d_plan = d_task.plan(ctx, opts, {"amber_g": g_plan})
    assert not ctx.loader.loaded
    assert g_plan.identity["spacy"]["pipeline"] == "en_core_web_lg" and len(g_plan.identity["spacy"]["vectors"]) == 16
    g = g_task.run(ctx, g_plan, {})
    d = d_task.run(ctx, d_plan, {"amber_g": [{k: s[k] for k in ("key", "image_id", "image", "prompt", "answer")}
                                             for s in g.samples]})
    ref = printed(DATA / "reference_a.txt")
    gv = {m.metric: m for m in g.metrics}
    assert {k: m.value for k, m in gv.items()} == ref["generative"]
    assert all(m.ci_low is not None and m.n == 6 for m in gv.values())
    dv = {m.metric: m.value for m in d.metrics}
    expected = {f"{k}{'' if sec == 'discriminative' else '_' + sec}": v
                for sec, vals in ref.items() if sec != "generative" for k, v in vals.items()}
    assert {k: v for k, v in dv.items() if k != "AMBER"} == expected
    assert dv["AMBER"] == pytest.approx((100 - ref["generative"]["CHAIR"] + ref["discriminative"]["F1"]) / 2)
    assert d.identity["amber_g"] == g_plan.eval_key and d.extra["metric_specs"]["AMBER"]["per_sample"] is False
    s = g.samples[0]
    assert {"mentions", "hallucinated", "covered", "cognitive", "truth", "hallu", "values"} <= set(s)
    assert s["values"]["CHAIR"] == [100.0 * len(s["hallucinated"]), len(s["mentions"])]
