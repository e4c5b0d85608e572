"""evalsuite/run.py runs own tasks and lmms-eval names through one loop over steps with one reuse rule:
a step is skipped when the store holds every result its plan names (`Plan.result_keys()`: an own task's
one eval_key, an lmms-eval group's leaves) for this checkpoint and ModelId, unless --rerun."""
from __future__ import annotations

from types import SimpleNamespace

from evalsuite.run import Step, _run_tasks
from evalsuite.tasks.base import Plan, RunContext
from evalsuite.types import MetricValue, TaskResult


class FakeStore:
    """has_result answers from `held` ({eval_key: store run}); write_run_once records what is stored."""

    def __init__(self, tmp_path, held: dict[str, str]):
        self.held, self.written = held, []
        self.metrics_dir = tmp_path / "metrics"

    def has_result(self, ckpt_hash, key, model_id=None):
        return self.held.get(key)

    def write_run_once(self, meta, results, ckpt_hash, dedup=True):
        self.written += [r.task for r in results]
        return meta["run_id"]


class FakeTask:
    """Returns `results` from run (a TaskResult, or a list as LmmsTask does) and counts its runs."""

    def __init__(self, results):
        self.results, self.runs = results, 0

    def run(self, ctx, plan, inputs):
        self.runs += 1
        return self.results


def _result(name: str) -> TaskResult:
    return TaskResult(name, "1", [MetricValue("acc", 0.5, True, n=2)], samples=[{"key": f"{name}/0"}])


def _steps():
    own_plan = Plan("caption", "1", {"x": 1}, {})
    group_plan = Plan("pope", "lmms", {}, {}, outputs={"pope/pope_adv": "kA", "pope/pope_pop": "kP"})
    own = FakeTask(_result("caption"))
    group = FakeTask([_result("pope/pope_adv"), _result("pope/pope_pop"), _result("pope")])  # leaves + aggregate
    return own_plan, own, group, [Step("caption", own, own_plan, (), True), Step("pope", group, group_plan, (), True)]


def _run(tmp_path, held, rerun=False):
    own_plan, own, group, steps = _steps()
    store = FakeStore(tmp_path, {k.replace("OWN", own_plan.eval_key): v for k, v in held.items()})
    ctx = RunContext(ckpt=str(tmp_path), data_root=None, output_dir=tmp_path / "out", ckpt_id="m1")
    cfg = SimpleNamespace(rerun=rerun, store=str(tmp_path))
    summary: dict = {}
    _run_tasks(ctx, cfg, steps, store, {"run_id": "r1"}, summary, "h1")
    return own, group, store, summary


def test_result_keys_of_an_own_task_and_of_a_group():
    own_plan, _, _, steps = _steps()
    assert own_plan.result_keys() == {"caption": own_plan.eval_key}
    assert steps[1].plan.result_keys() == {"pope/pope_adv": "kA", "pope/pope_pop": "kP"}


def test_a_step_is_reused_only_when_the_store_holds_every_result_it_names(tmp_path):
    own, group, store, summary = _run(tmp_path, {"OWN": "old1", "kA": "old2"})   # one leaf of two
    assert (own.runs, group.runs) == (0, 1)
    assert summary["caption"]["reused"] == "old1"
    assert store.written == ["pope/pope_adv", "pope/pope_pop", "pope"]   # the aggregate stored with its leaves

    own, group, store, summary = _run(tmp_path, {"OWN": "old1", "kA": "old2", "kP": "old3"})
    assert (own.runs, group.runs, store.written) == (0, 0, [])
    assert {k: v["reused"] for k, v in summary.items()} == {"caption": "old1", "pope/pope_adv": "old2",
                                                           "pope/pope_pop": "old3"}


def test_rerun_runs_every_step(tmp_path):
    own, group, store, _ = _run(tmp_path, {"OWN": "old1", "kA": "old2", "kP": "old3"}, rerun=True)
    assert (own.runs, group.runs) == (1, 1)
    assert store.written == ["caption", "pope/pope_adv", "pope/pope_pop", "pope"]


def test_a_key_known_only_after_the_run_never_matches(tmp_path):
    """An lmms-eval leaf whose yaml has no version has no eval_key before it runs: its step always runs."""
    _, _, group, steps = _steps()
    steps[1].plan = Plan("pope", "lmms", {}, {}, outputs={"pope/pope_adv": "kA", "pope/pope_pop": None})
    store = FakeStore(tmp_path, {"kA": "old2"})
    ctx = RunContext(ckpt=str(tmp_path), data_root=None, output_dir=tmp_path / "out", ckpt_id="m1")
    _run_tasks(ctx, SimpleNamespace(rerun=False, store=str(tmp_path)), steps[1:], store, {"run_id": "r1"}, {}, "h1")
    assert group.runs == 1
