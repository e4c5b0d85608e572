"""The metric specs of the lmms-eval tasks evalsuite ships data for (POPE, MME), applied when a run's
lmms-eval results become TaskResults (`evalsuite.lmms.results`).

lmms-eval computes the values; these specs give each per-document result its per-sample row (what the
table's CIs and paired deltas resample), the metric's direction, and the rows lmms-eval does not report:

- POPE (lmms_eval/tasks/pope/utils.py: each document's {prediction, ground_truth}): accuracy,
  precision, recall, F1 per question; `model_yes_ratio`, the model's share of "yes" answers; and,
  when one task holds several sampling settings (random / popular / adversarial, the document's
  `category`), accuracy, F1 and model_yes_ratio per setting (variant = the setting). lmms-eval's
  `pope_yes_ratio` counts the ground truth's "yes" (pope_aggregate_yes_ratio): a property of the data,
  0.5 on balanced data; it is replaced by `model_yes_ratio` and the result's extra says so.
- MME (lmms_eval/tasks/mme/utils.py mme_aggregate_results): per category the mean over images of
  acc + acc+ (100 * correct / 2 + 100 * both correct), the total the sum over categories. The pairing
  unit is one image (its two questions), the category a bootstrap stratum; a question's row is
  (50 * correct + 50 * both correct, 1/2), so an image's two rows sum to its acc + acc+ and a count of 1.
"""
from __future__ import annotations

from evalsuite.tasks.metric_spec import MetricSpec, fill_values, score, specs_extra
from evalsuite.types import MetricValue, TaskResult

POPE_SETTINGS = ("random", "popular", "adversarial")
MODEL_YES = "model_yes_ratio"
POPE_REPLACED = {"pope_yes_ratio": MODEL_YES}
_POPE_FIELDS = ("pope_accuracy", "pope_f1_score", "pope_precision", "pope_recall", "pope_yes_ratio")
MME_METRICS = ("mme_perception_score", "mme_cognition_score")


def _said_truth(s: dict) -> tuple[bool, bool] | None:
    for f in _POPE_FIELDS:
        v = s.get(f)
        if isinstance(v, dict) and "prediction" in v and "ground_truth" in v:
            return (str(v["prediction"]).strip().lower() == "yes", str(v["ground_truth"]).strip().lower() == "yes")
    return None


def _pope_row(cols):
    def row(s: dict):
        st = _said_truth(s)
        return None if st is None else cols(*st)
    return row


def _setting(s: dict) -> str | None:
    doc = s.get("doc")
    cat = doc.get("category") if isinstance(doc, dict) else None
    return cat if cat in POPE_SETTINGS else None


def _acc(said: bool, truth: bool) -> tuple:
    return (float(said == truth), 1.0)


def _prec(said: bool, truth: bool) -> tuple:
    return (float(said and truth), float(said))


def _rec(said: bool, truth: bool) -> tuple:
    return (float(said and truth), float(truth))


def _f1(said: bool, truth: bool) -> tuple:
    return (float(said and truth), float(said), float(truth))


def _yes(said: bool, truth: bool) -> tuple:
    return (float(said), 1.0)


POPE_METRICS = (
    MetricSpec("pope_accuracy", "up", _pope_row(_acc), subset=_setting),
    MetricSpec("pope_precision", "up", _pope_row(_prec)),
    MetricSpec("pope_recall", "up", _pope_row(_rec)),
    MetricSpec("pope_f1_score", "up", _pope_row(_f1), stat="f1", subset=_setting),
    MetricSpec(MODEL_YES, "none", _pope_row(_yes), subset=_setting),
)


def _mme_field(metric: str, s: dict) -> dict | None:
    v = s.get(metric)
    return v if isinstance(v, dict) and isinstance(v.get("score"), (int, float)) else None


def _mme_unit(s: dict) -> str | None:
    for m in MME_METRICS:
        v = _mme_field(m, s)
        if v is not None:
            return f"{v.get('category')}/{v.get('question_id')}"
    return None


def _mme_stratum(s: dict) -> str | None:
    u = _mme_unit(s)
    return None if u is None else u.split("/", 1)[0]


def mme_specs(samples: list[dict]) -> tuple[MetricSpec, ...]:
    """MME's specs over `samples`: a question's row needs whether its image's other question is right."""
    scores: dict[tuple, list[float]] = {}
    for s in samples:
        for m in MME_METRICS:
            v = _mme_field(m, s)
            if v is not None:
                scores.setdefault((m, _mme_unit(s)), []).append(float(v["score"]))

    def row(metric: str):
        def fn(s: dict):
            v = _mme_field(metric, s)
            if v is None:
                return None
            both = scores[(metric, _mme_unit(s))]
            return (50.0 * float(v["score"]) + 50.0 * float(len(both) == 2 and sum(both) == 2), 0.5)
        return fn

    return tuple(MetricSpec(m, "up", row(m), stat="sum_of_ratios", unit=_mme_unit, stratum=_mme_stratum)
                 for m in MME_METRICS)


def specs_for(result: TaskResult) -> tuple[MetricSpec, ...]:
    """The declared specs of a converted lmms-eval leaf result: by the metrics lmms-eval reported."""
    names = {m.metric for m in result.metrics}
    if names & {"pope_accuracy", "pope_f1_score"}:
        return POPE_METRICS
    if names & set(MME_METRICS):
        return mme_specs(result.samples)
    return ()


def declare(result: TaskResult, n_boot: int = 0, seed: int = 0) -> TaskResult:
    """Fill the samples' per-sample values, set each declared metric's direction, add the rows lmms-eval
    does not report (module doc) and record the specs in `extra["metric_specs"]`. lmms-eval's own values
    are kept as they are; rows added here get a CI only with `n_boot` > 0 (the table bootstraps them
    from the stored values otherwise)."""
    specs = specs_for(result)
    if not specs or not result.samples:
        return result
    fill_values(result.samples, specs)
    by_name = {s.name: s for s in specs}
    kept: list[MetricValue] = []
    replaced = {}
    for m in result.metrics:
        if m.metric in POPE_REPLACED and specs is POPE_METRICS:
            replaced[m.metric] = POPE_REPLACED[m.metric]
            continue
        if m.metric in by_name:
            m.higher_is_better = by_name[m.metric].direction == "up"
        kept.append(m)
    have = {(m.metric, m.variant) for m in kept}
    added = [m for m in score(result.samples, specs, n_boot=n_boot, seed=seed) if (m.metric, m.variant) not in have]
    # the whole set's rows first, then one block per setting (a table reads a setting across)
    order = {None: -1, **{s: i for i, s in enumerate(POPE_SETTINGS)}}
    kept += sorted(added, key=lambda m: order.get(m.variant, len(order)))
    result.metrics = kept
    result.extra = {**result.extra, "metric_specs": specs_extra(specs),
                    **({"replaced_metrics": replaced} if replaced else {})}
    return result
