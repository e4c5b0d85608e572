"""A worked example of adding an own task: this file's `ExampleTask` plus one registry line
(`TASKS["short_answer"] = "tests.unit.test_example_task:ExampleTask"`, set here with monkeypatch; a real
task puts that line in evalsuite/tasks/registry.py). It runs through `evalsuite run` on the kit's tiny
model and the synthetic world, and its declared metric lands in the store and in `evalsuite table` with
its per-sample values (a sample CI) and its direction. docs/ARCHITECTURE.md ("Adding a task") shows it."""
from __future__ import annotations

import json
from dataclasses import dataclass

from evalsuite.tasks.base import Plan, RunContext
from evalsuite.tasks.metric_spec import MetricSpec, score, specs_extra
from evalsuite.types import TaskResult

PROMPT = "What is in the image?"


def _short(s: dict) -> tuple:
    """One answer -> (1 if it has at most 3 words, 1): the metric is the share of short answers."""
    return (float(len(s["answer"].split()) <= 3), 1.0)


METRICS = (MetricSpec("short_answer_rate", "up", _short),)


@dataclass
class ExampleOptions:
    split: str = "val"


class ExampleTask:
    name = "short_answer"
    version = "1"
    Options = ExampleOptions

    def requires(self, opts: ExampleOptions, tasks: list[str]) -> tuple[str, ...]:
        return ()

    def plan(self, ctx: RunContext, opts: ExampleOptions, sources: dict) -> Plan:
        from evalsuite.identity import digest, file_fingerprint
        from evalsuite.tasks.caption import answer_identity, coco_images
        from evalsuite.world.layout import CocoLayout

        images = coco_images(ctx.data_root, opts.split)[: ctx.limit]
        data = file_fingerprint([CocoLayout(ctx.data_root, opts.split).instances_json])
        identity = answer_identity(ctx, data, opts.split, [im["id"] for im in images], PROMPT, ctx.gen)
        return Plan(self.name, self.version, identity, {"split": opts.split, "prompt": PROMPT},
                    state={"images": images, "data_id": digest(data)})

    def run(self, ctx: RunContext, plan: Plan, inputs: dict) -> TaskResult | None:
        from evalsuite.tasks.answers import generate_answers

        samples = generate_answers(ctx, plan.state["images"], PROMPT, ctx.gen, plan.state["data_id"])
        if samples is None:     # a data-parallel rank other than 0
            return None
        return TaskResult(task=self.name, version=self.version, metrics=score(samples, METRICS, n_boot=0),
                          samples=samples, config=plan.config, identity=plan.identity,
                          extra={"metric_specs": specs_extra(METRICS)})


def test_example_task_runs_and_its_metric_reaches_the_table(tiny_vlm_dir, world_dir, tmp_path, monkeypatch, capsys):
    """4 images of the world: the stored short_answer_rate is the share of stored answers of <= 3
    words, each sample stores its row, and `evalsuite table` shows the metric with ↑ and a sample CI."""
    from evalsuite import cli
    from evalsuite.store import Store
    from evalsuite.tasks import registry

    monkeypatch.setitem(registry.TASKS, "short_answer", "tests.unit.test_example_task:ExampleTask")
    store = tmp_path / "st"
    assert cli.main(["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "short_answer", "--data-root", str(world_dir),
                     "--limit", "4", "--store", str(store), "--max-new-tokens", "6"]) == 0
    rows = Store(store).snapshot().metrics()
    assert list(rows["metric"]) == ["short_answer_rate"] and list(rows["task"]) == ["short_answer"]
    records = Store(store).snapshot().sample_records(task="short_answer")
    assert len(records) == 4
    short = [float(len(r["answer"].split()) <= 3) for r in records]
    assert [r["values"]["short_answer_rate"] for r in records] == [[x, 1.0] for x in short]
    assert rows["value"].iloc[0] == sum(short) / 4
    capsys.readouterr()
    assert cli.main(["table", "--store", str(store), "--format", "json", "--n-boot", "50"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert (row["metric_key"], row["direction"], row["per_sample"]) == \
        ("short_answer/short_answer_rate", "up", "stored")
    assert row["value"] == sum(short) / 4 and row["ci_source"] == "samples"
    assert row["ci_low"] <= row["value"] <= row["ci_high"]
