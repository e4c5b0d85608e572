"""A worked example of adding an own task with options: this file's `ExampleTask` (with its
`ExampleOptions`) plus one registry line (`"short_answer": "tests.unit.test_example_task:ExampleTask"` in
`TASKS`, set here with monkeypatch; a real task puts that line in evalsuite/tasks/registry.py). Nothing
else: its options become the `short_answer:` section of the eval config, with their `--help` lines and
a convenience flag. It runs through `evalsuite run` on the kit's tiny model and the synthetic world, its
declared metric lands in the store and in `evalsuite table` with its per-sample values (a sample CI) and
its direction, and an option set by `short_answer.max_words=2` is part of the result's identity and is
shown by `evalsuite report`. docs/ARCHITECTURE.md ("Adding a task") shows it."""
from __future__ import annotations

import html
import json
from dataclasses import dataclass

import pytest

from evalsuite.config import opt
from evalsuite.tasks.base import Plan, RunContext
from evalsuite.tasks.metric_spec import MetricSpec, score
from evalsuite.types import TaskResult

LINE = ("short_answer", "tests.unit.test_example_task:ExampleTask")   # the registry line


def _short(s: dict) -> tuple:
    """One answer -> (1 if it has at most max_words words, 1): the metric is the share of short answers."""
    return (float(len(s["answer"].split()) <= s["max_words"]), 1.0)


METRICS = (MetricSpec("short_answer_rate", "up", _short),)


@dataclass
class ExampleOptions:
    split: str = opt("val", "split of the data root", alias="split")
    prompt: str = opt("What is in the image?", "the question asked about every image")
    max_words: int = opt(3, "an answer of at most this many words counts as short", ge=1)


class ExampleTask:
    name = "short_answer"
    version = "1"
    Options = ExampleOptions
    metrics = METRICS

    def requires(self, opts: ExampleOptions, tasks: list[str]) -> tuple[str, ...]:
        return ()

    def plan(self, ctx: RunContext, opts: ExampleOptions, sources: dict) -> Plan:
        from evalsuite.identity import digest, file_fingerprint
        from evalsuite.tasks.coco import answer_identity, coco_images
        from evalsuite.world.layout import CocoLayout

        images = coco_images(ctx.data_root, opts.split)[: ctx.limit]
        data = file_fingerprint([CocoLayout(ctx.data_root, opts.split).instances_json])
        identity = answer_identity(ctx, data, opts.split, [im["id"] for im in images], opts.prompt, ctx.gen)
        # identity: every option (max_words included) + the answers' identity; config: every option + these
        return Plan.of(self, opts, identity, {"limit": ctx.limit}, state={"images": images, "data_id": digest(data)})

    def answers(self, ctx: RunContext, plan: Plan) -> list[dict] | None:
        from evalsuite.tasks.answers import generate_answers

        s = plan.state
        return generate_answers(ctx, s["images"], plan.config["prompt"], ctx.gen, s["data_id"], task=self.name)

    def run(self, ctx: RunContext, plan: Plan, inputs: dict) -> TaskResult | None:
        samples = self.answers(ctx, plan)
        if samples is None:     # a data-parallel rank other than 0
            return None
        samples = [{**s, "max_words": plan.config["max_words"]} for s in samples]
        return plan.result(score(samples, METRICS, n_boot=0), samples)


def test_example_task_with_options_runs_and_reaches_help_table_and_report(tiny_vlm_dir, world_dir, tmp_path,
                                                                          monkeypatch, capsys):
    """4 images of the world, run at max_words 3 (default) and 2: `evalsuite run --help` lists the task's
    options, each stored short_answer_rate is the share of stored answers within max_words, the two
    settings are two eval_keys, `evalsuite table` shows the metric with ↑ and a sample CI, and the
    report labels the two setups by the option."""
    from evalsuite import cli
    from evalsuite.store import Store
    from evalsuite.tasks import registry

    monkeypatch.setitem(registry.TASKS, *LINE)
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        cli.main(["run", "--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    assert "short_answer.max_words" in shown and "counts as short" in shown
    assert "short_answer.split" in shown.split("--split")[-1]   # the convenience flag sets it

    store = tmp_path / "st"
    base = ["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "short_answer", "--data-root", str(world_dir),
            "--limit", "4", "--store", str(store), "--max-new-tokens", "6"]
    assert cli.main(base) == 0
    assert cli.main([*base, "short_answer.max_words=2"]) == 0
    assert cli.main([*base, "short_answer.max_words=0"]) == 2     # the field's range, one line
    assert "short_answer.max_words: must be >= 1, got 0" in capsys.readouterr().err

    rows = Store(store).snapshot().metrics()
    assert set(rows["metric"]) == {"short_answer_rate"} and set(rows["task"]) == {"short_answer"}
    assert rows["eval_key"].nunique() == 2
    for r in rows.itertuples():
        records = [x for x in Store(store).snapshot().sample_records(task="short_answer") if x["run_id"] == r.run_id]
        assert len(records) == 4
        limit = json.loads(r.eval_setup)["max_words"]
        short = [float(len(x["answer"].split()) <= limit) for x in records]
        assert [x["values"]["short_answer_rate"] for x in records] == [[v, 1.0] for v in short]
        assert r.value == sum(short) / 4

    capsys.readouterr()
    assert cli.main(["table", "--store", str(store), "--format", "json", "--n-boot", "50"]) == 0
    table = json.loads(capsys.readouterr().out)["rows"]
    assert len(table) == 2
    for row in table:
        assert (row["metric_key"], row["direction"], row["per_sample"]) == \
            ("short_answer/short_answer_rate", "up", "stored")
        assert row["ci_source"] == "samples" and row["ci_low"] <= row["value"] <= row["ci_high"]

    out = tmp_path / "report"
    assert cli.main(["report", "--store", str(store), "--out", str(out), "--n-boot", "50"]) == 0
    page = html.unescape((out / "index.html").read_text(encoding="utf-8"))
    assert "short_answer_rate" in page
    assert "max_words=2" in page and "max_words=3" in page


PLANNED: list = []


@dataclass
class NeedsFileOptions:
    answers: str | None = opt(None, "a file of reference answers", path="file", required=True)
    words: str | None = opt(None, "a word list", path="file", alias="word_list",
                            required="words.txt, one word a line")


class NeedsFileTask:
    """A throwaway task with two required options and no check of its own: its plan() takes them as given."""
    name = "needs_file"
    version = "1"
    Options = NeedsFileOptions
    metrics = METRICS
    reads_data_root = False

    def requires(self, opts: NeedsFileOptions, tasks: list[str]) -> tuple[str, ...]:
        return ()

    def plan(self, ctx: RunContext, opts: NeedsFileOptions, sources: dict) -> Plan:
        PLANNED.append(opts)
        return Plan.of(self, opts, {"answers": opts.answers, "words": opts.words}, {})


def test_a_required_option_is_refused_from_its_declaration(tiny_vlm_dir, tmp_path, monkeypatch, capsys):
    """`evalsuite run` of a task whose plan() checks nothing: each required option not given (or given
    empty) is one line, exit 2, naming section.key, what to pass (the flag where the field has one, the
    hint its `required` carries, else its help) and the task; nothing is planned or written."""
    from evalsuite import cli
    from evalsuite.tasks import registry

    monkeypatch.setitem(registry.TASKS, "needs_file", "tests.unit.test_example_task:NeedsFileTask")
    PLANNED.clear()
    (tmp_path / "a.txt").write_text("a\n")
    out, store = tmp_path / "out", tmp_path / "store"
    base = ["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "needs_file", "--output", str(out), "--store", str(store)]
    missing_answers = ("needs_file.answers: not given (task needs_file needs it); pass needs_file.answers=FILE: a "
                       "file of reference answers")
    cases = [
        ([], missing_answers),
        (["needs_file.answers="], missing_answers),     # empty is not given
        ([f"needs_file.answers={tmp_path / 'a.txt'}"],
         "needs_file.words: not given (task needs_file needs it); pass --word-list FILE: words.txt, one word a line"),
    ]
    for extra, message in cases:
        capsys.readouterr()
        assert cli.main([*base, *extra]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"evalsuite: error: {message}"]
    assert PLANNED == [] and not out.exists() and not store.exists()
