"""Per-object analysis on a demo-like store: the synthetic world's val split, CHAIR scored by the real
`chair` task (plan: GT from the world's annotations; run: scorer, records, metrics) and stored as
`evalsuite run` stores it, for a base and two CSR iterations of one lineage. The answers are the demo's
habit rather than a trained model's (training the demo takes minutes per iteration): the world's
detailed caption of each image, to which the base appends the absent co-occurrence partner of a present
object (dog/cat, car/truck, cup/bottle, ...: evalsuite/world/categories.py PARTNERS) as often as the demo's
SFT data does, an iteration half as often, the last never. The table and the demo's own report stage
(training/demo `_report`) must show those objects as the ones whose hallucination rate fell."""
from __future__ import annotations

import csv
import io
import json
import random
from pathlib import Path

import pytest

RATES = (0.5, 0.25, 0.0)       # configs/demo.yaml hallucination_rate, then halved per iteration


def _scenes(world: Path) -> dict:
    from evalsuite.world.scene import objects_from_annotations

    data = json.loads((world / "annotations" / "instances_val.json").read_text())
    anns: dict = {}
    for a in data["annotations"]:
        anns.setdefault(a["image_id"], []).append(a)
    return {im["id"]: objects_from_annotations(anns.get(im["id"], []), im["width"], im["height"])
            for im in data["images"] if anns.get(im["id"])}


def demo_like_store(tmp: Path, world: Path, n_images: int):
    from evalsuite.gen_settings import GenConfig
    from evalsuite.store import Store
    from evalsuite.tasks.base import RunContext
    from evalsuite.tasks.registry import load_task
    from evalsuite.world.captions import absent_partner, caption_for

    scenes = _scenes(world)
    store = Store(tmp / "results")
    task = load_task("chair")
    for it, rate in enumerate(RATES):
        ctx = RunContext(ckpt=f"/ckpts/iter_{it}", data_root=world, output_dir=tmp / f"out{it}", batch_size=4,
                         gen=GenConfig(max_new_tokens=48), resume_root=tmp / "resume", ckpt_id=f"ck{it}")
        plan = task.plan(ctx, task.Options(n_images=n_images, seed=0, cache_dir=str(tmp / "gt"), n_boot=0), {})
        rng = random.Random(it)

        def answers(ctx, plan, rng=rng, rate=rate):
            out = []
            for im in plan.state["images"]:
                objs = scenes[im["id"]]
                absent = absent_partner(objs, rng) if rng.random() < rate else None
                out.append({"key": str(im["id"]), "image_id": im["id"], "image": im["path"],
                            "prompt": plan.config["prompt"], "answer": caption_for(
                                objs, rng, template="positions", absent=absent, absent_last=True)})
            return out

        task.answers = answers
        result = task.run(ctx, plan, {})
        store.write_run({"ckpt": f"/ckpts/iter_{it}", "ckpt_hash": f"{it:064x}", "iteration": it,
                         "parent": f"/ckpts/iter_{it - 1}" if it else None, "method": "csr" if it else "sft",
                         "label": "demo/base" if it == 0 else f"demo/iter_{it}", "data_root": str(world),
                         "config": {}}, [result])
    return store


@pytest.fixture(scope="module")
def demo(tmp_path_factory, punkt_dir):
    from evalsuite.world.build import build_world

    tmp = tmp_path_factory.mktemp("objects")
    world = build_world(tmp / "world", images=300, seed=0, val_fraction=0.5)
    return tmp, demo_like_store(tmp, world, n_images=150)


def test_table_shows_the_partners_unlearned(demo, capsys):
    from evalsuite.cli import main
    from evalsuite.world.categories import BY_NAME, PARTNERS

    tmp, store = demo
    assert main(["table", "--store", str(store.path), "--by", "object", "--task", "chair", "--format", "csv",
                 "--top", "12"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {(r["base"], r["vs"]) for r in rows} == {("demo/base", "demo/iter_2")}
    fell = [r for r in rows if r["significant"] == "true" and float(r["delta_high"]) < 0]
    # the last checkpoint hallucinates nothing: every object the base hallucinated fell, none rose
    assert all(float(r["vs_hallucinated"]) == 0 for r in rows)
    assert {r["object"] for r in fell} == {r["object"] for r in rows if r["significant"] == "true"}
    hallucinated = {r["object"] for r in rows if int(r["base_hallucinated"]) > 0}
    assert len(fell) >= 6 and {r["object"] for r in fell} <= hallucinated
    # the habit: each base hallucination of an object that fell is the co-occurrence partner of an object
    # in that image (dog -> cat, truck -> car, ...)
    base_run = store.snapshot().runs().iloc[0]["run_id"]
    recs = store.snapshot().sample_records(task="chair", run_id=base_run)
    seen = 0
    for rec in recs:
        for _, obj in rec["hallucinated"]:
            if obj in {r["object"] for r in fell}:
                assert BY_NAME[obj].id in {PARTNERS[BY_NAME[g].id] for g in rec["gt_objects"]}, (obj, rec["gt_objects"])
                seen += 1
    assert seen >= sum(int(r["base_hallucinated"]) for r in fell) > 0
    # md: the same comparison, largest fall first
    assert main(["table", "--store", str(store.path), "--by", "object", "--top", "3"]) == 0
    md = capsys.readouterr().out
    assert "### chair [original]: demo/base → demo/iter_2" in md and md.count("]* |") >= 3


def test_demo_report_stage_has_the_object_section(demo):
    from tests.unit.test_report import section
    from training.demo import DemoConfig, _report

    tmp, store = demo
    cfg = DemoConfig(name="demo", store=str(store.path), report_dir=str(tmp / "report"))
    html = Path(_report(cfg)).read_text()
    sec = section(html, "objects")
    assert "chair <span class=\"tag setup\">original</span>: demo/base → demo/iter_2" in sec
    assert sec.count('<svg class="plot"') == 1 and sec.count('class="better"') >= 4
