"""The per-sample values behind each metric: what a bootstrap over a run's records resamples.

One entry per metric name: how one record (a caption, a question) becomes a row of numbers whose column
sums give the metric (`evalsuite.metrics.stats`: a mean is sum(x)/sum(1), CHAIR_i is
sum(hallucinated)/sum(mentions), ...), the unit two checkpoints are paired on, and the metric's direction
when the stored one says nothing useful. A metric not listed here (a median, training statistics) has
no per-sample form: its deltas keep the interval from the two stored CIs (MOVER, "independent").

Records are the task's own (`TaskResult.samples`): the CHAIR task's `CHAIRs`/`mentions`/`hallucinated`/
`recalled`/`gt_objects`/`n_tokens` (or the report's older `chair_s`/`mentioned`/`gt` shape), the relevance
task's `relevance`/`relevance_whole`/`sentence_scores`, and lmms-eval's per-document results for POPE
(`pope_accuracy`: {prediction, ground_truth}, the answer as lmms-eval parsed it) and MME
(`mme_perception_score`/`mme_cognition_score`: {question_id, category, score}).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from evalsuite.metrics.stats import f1_stat, ratio_stat, sum_of_ratios_stat
from evalsuite.store.table import _num

POPE_SETTINGS = ("random", "popular", "adversarial")
MODEL_YES = "model_yes_ratio"      # the model's share of "yes" answers (lmms-eval's pope_yes_ratio is the truth's)


def _len(r: dict, *fields: str) -> int | None:
    for f in fields:
        if isinstance(r.get(f), (list, tuple)):
            return len(r[f])
    return None


def _both(a, b) -> tuple | None:
    return None if a is None or b is None else (float(a), float(b))


def _pope(r: dict) -> dict | None:
    """lmms-eval's per-question POPE result: {prediction, ground_truth} (any of the metric fields)."""
    for f in ("pope_accuracy", "pope_f1_score", "pope_precision", "pope_recall", "pope_yes_ratio"):
        v = r.get(f)
        if isinstance(v, dict) and "prediction" in v and "ground_truth" in v:
            return v
    return None


def _pope_row(r: dict, cols: Callable[[bool, bool], tuple]) -> tuple | None:
    p = _pope(r)
    if p is None:
        return None
    said, truth = str(p["prediction"]).strip().lower() == "yes", str(p["ground_truth"]).strip().lower() == "yes"
    return cols(said, truth)


def pope_setting(r: dict) -> str | None:
    doc = r.get("doc")
    cat = doc.get("category") if isinstance(doc, dict) else None
    return cat if isinstance(cat, str) else None


def _key(r: dict) -> str | None:
    k = r.get("key", r.get("image_id"))
    return None if k is None else str(k)


@dataclass(frozen=True)
class SampleMetric:
    """row: record -> numbers (None: the record lacks them); stat: column sums -> value;
    direction: "none" for a diagnostic (no better or worse), None = the stored higher_is_better;
    by_setting: the records can be split by POPE setting (a variant named after the setting)."""

    row: Callable[[dict], tuple | None]
    stat: Callable = ratio_stat
    direction: str | None = None
    by_setting: bool = False


SAMPLE_METRICS: dict[str, SampleMetric] = {
    # CHAIR: per caption; CHAIR_i and Recall are ratios of sums over captions (metrics/chair.py)
    "CHAIRs": SampleMetric(lambda r: _both(_num(r.get("CHAIRs", r.get("chair_s"))), 1)),
    "CHAIRi": SampleMetric(lambda r: _both(_len(r, "hallucinated"), _len(r, "mentions", "mentioned"))),
    "Recall": SampleMetric(lambda r: _both(_len(r, "recalled"), _len(r, "gt_objects"))),
    # caption length is context for the others (longer captions mention more), not a goal
    "Len": SampleMetric(lambda r: _both(_num(r.get("n_tokens")), 1), direction="none"),
    # relevance: per caption, except the sentence mean that pools every sentence
    "relevance_mean": SampleMetric(lambda r: _both(_num(r.get("relevance")), 1)),
    "relevance_whole_mean": SampleMetric(lambda r: _both(_num(r.get("relevance_whole")), 1)),
    "relevance_sentence_mean": SampleMetric(
        lambda r: _both(sum(map(float, r["sentence_scores"])), len(r["sentence_scores"]))
        if isinstance(r.get("sentence_scores"), list) else None),
    # POPE: per question, from lmms-eval's parsed prediction (pope_aggregate_* in lmms_eval/tasks/pope)
    "pope_accuracy": SampleMetric(lambda r: _pope_row(r, lambda s, t: (float(s == t), 1.0)), by_setting=True),
    "pope_precision": SampleMetric(lambda r: _pope_row(r, lambda s, t: (float(s and t), float(s))), by_setting=True),
    "pope_recall": SampleMetric(lambda r: _pope_row(r, lambda s, t: (float(s and t), float(t))), by_setting=True),
    "pope_f1_score": SampleMetric(lambda r: _pope_row(r, lambda s, t: (float(s and t), float(s), float(t))),
                                  stat=f1_stat, by_setting=True),
    MODEL_YES: SampleMetric(lambda r: _pope_row(r, lambda s, t: (float(s), 1.0)), direction="none", by_setting=True),
}
# MME is scored per image (two questions): see `mme_units`
MME_METRICS = ("mme_perception_score", "mme_cognition_score")
# lmms-eval's pope_yes_ratio counts the ground truth's "yes" (pope_aggregate_yes_ratio): a property of
# the data, not of the model; it is shown as the model's yes ratio instead where the records allow
REPLACED = {"pope_yes_ratio": MODEL_YES}


def direction(metric: str, higher_is_better) -> str:
    """"up", "down" or "none" (a diagnostic whose change is neither better nor worse)."""
    spec = SAMPLE_METRICS.get(metric)
    if metric in REPLACED or (spec is not None and spec.direction == "none"):
        return "none"
    return "up" if bool(higher_is_better) else "down"


def mme_units(records: list[dict], metric: str) -> dict[str, tuple[str, tuple]]:
    """MME (lmms_eval/tasks/mme mme_aggregate_results): per category, the mean over images of
    acc + acc+ = 100 * correct/2 + 100 * (both correct); the total adds the categories. Unit = one
    image of one category: value 50 * correct + 100 * both, counted once."""
    per: dict[tuple, list[float]] = {}
    for r in records:
        v = r.get(metric)
        if isinstance(v, dict) and _num(v.get("score")) is not None:
            per.setdefault((str(v.get("category")), str(v.get("question_id"))), []).append(float(v["score"]))
    return {f"{c}/{q}": (c, (50.0 * sum(s) + 100.0 * (sum(s) == len(s) == 2), 1.0))
            for (c, q), s in per.items()}


def units(records: list[dict], metric: str, setting: str | None = None) -> dict[str, tuple[str | None, tuple]]:
    """{pairing key: (stratum, row)} for `metric` over `records` ({} when they do not carry it);
    `setting` keeps a POPE setting's questions only."""
    if metric in MME_METRICS:
        return mme_units(records, metric)
    spec = SAMPLE_METRICS.get(metric)
    if spec is None:
        return {}
    out = {}
    for r in records:
        if setting is not None and pope_setting(r) != setting:
            continue
        row, key = spec.row(r), _key(r)
        if row is not None and key is not None:
            out[key] = (None, row)
    return out


def design(items: list[tuple[str | None, tuple]], metric: str):
    """(rows (n, k), strata or None, stat) for the bootstrap: MME gets a (sum, count) column pair per
    category and category strata; the others their rows as they are."""
    import numpy as np

    if metric in MME_METRICS:
        cats = sorted({c for c, _ in items})
        rows = np.zeros((len(items), 2 * len(cats)))
        for i, (c, (v, one)) in enumerate(items):
            j = cats.index(c)
            rows[i, 2 * j:2 * j + 2] = (v, one)
        return rows, np.array([c for c, _ in items]), sum_of_ratios_stat
    return np.array([row for _, row in items], dtype=float), None, SAMPLE_METRICS[metric].stat


def has_sample_form(metric: str) -> bool:
    return metric in SAMPLE_METRICS or metric in MME_METRICS
