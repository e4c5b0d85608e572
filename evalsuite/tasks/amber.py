"""Tasks `amber_g` (AMBER generative) and `amber_d` (AMBER discriminative), scored as the released AMBER
`inference.py` scores them (evalsuite/metrics/amber.py, docs/amber.md).

    evalsuite run --ckpt CK --tasks amber_g,amber_d amber.data_root=AMBER amber.image_root=AMBER/image \\
        amber.spacy_model=en_core_web_lg

Options (`amber:` section of the eval config, `AmberOptions`, shared by both tasks): data_root (the released
repository's layout: data/annotations.json, data/relation.json, data/safe_words.txt, data/metrics.txt,
data/query/query_generative.json, data/query/query_discriminative.json), image_root (AMBER_<n>.jpg),
spacy_model (an installed pipeline name or a pipeline directory; never downloaded), similarity (the
near-synonym threshold, 0.8), answer_rule (amber_d: "released" | "first_word"), max_new_tokens, nltk_data,
n_boot. Each query is asked with its own text from the query file, as released.

amber_g stores CHAIR, Cover, Hal, Cog; amber_d stores Accuracy, Precision, Recall, F1 ("No" is the positive
class) overall and as `<metric>_<type>` for existence, attribute, state, number, action, relation (a type
without queries stores nothing). Each value is the number the released script prints; the CI is a
bootstrap over the per-sample rows. With amber_g in the same run, amber_d also stores `AMBER`
= (100 - CHAIR + F1) / 2 (its identity then names amber_g's result).
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from evalsuite.config import check_fields, opt
from evalsuite.errors import UserError
from evalsuite.metrics.amber import DIMENSIONS, dimensions_of
from evalsuite.tasks.base import Plan, RunContext
from evalsuite.tasks.metric_spec import MetricSpec, score
from evalsuite.types import MetricValue, TaskResult

log = logging.getLogger(__name__)

SECTION = "amber"           # the eval config section both tasks read
TASK_NAMES = ("amber_g", "amber_d")


@dataclass
class AmberOptions:
    data_root: str | None = opt(None, "the released AMBER repository's folder (data/annotations.json, data/query/...)",
                                path="dir", identity=False, required=True)
    image_root: str | None = opt(None, "the AMBER images folder (AMBER_<n>.jpg)", path="dir", identity=False,
                                 required=True)
    # identity False: the pipeline enters the identity by its name, version and vectors digest
    spacy_model: str = opt("en_core_web_lg", "spaCy pipeline with word vectors: an installed name or a directory "
                                             "(never downloaded)", identity=False)
    similarity: float = opt(0.8, "near-synonym threshold: spaCy similarity above it counts (amber_g)", gt=0, lt=1)
    answer_rule: Literal["released", "first_word"] = opt(
        "released", "how amber_d reads Yes/No: 'released' = the whole answer is exactly Yes or No; "
                    "'first_word' = its first word, any case")
    max_new_tokens: int | None = opt(None, "token cap of an answer (null = the run's gen.max_new_tokens)",
                                     identity=False, ge=1)
    nltk_data: str | None = opt(None, "an NLTK data dir searched first", path="dir", identity=False)
    n_boot: int = opt(1000, "bootstrap resamples of the confidence intervals (0 = none)", identity=False, ge=0)

    def __post_init__(self) -> None:
        check_fields(self, SECTION)
        for name in ("data_root", "image_root", "nltk_data"):
            value = getattr(self, name)
            if value is not None and not Path(value).is_dir():
                raise UserError(f"amber.{name}: {value}: no such directory")


# per-sample rows in percent, so the bootstrap's values are on the printed scale
GEN_METRICS = (
    MetricSpec("CHAIR", "down", lambda s: (100.0 * len(s["hallucinated"]), len(s["mentions"]))),
    MetricSpec("Cover", "up", lambda s: (100.0 * len(s["covered"]), len(s["truth"]))),
    MetricSpec("Hal", "down", lambda s: (100.0 * bool(s["hallucinated"]), 1)),
    MetricSpec("Cog", "down", lambda s: (100.0 * len(s["cognitive"]), len(s["hallu"]))),
)


def amber_unread(tasks: list[str]) -> list[tuple]:
    """(field, switch, now, need) of the amber options only the AMBER task absent from `tasks` reads
    (EvalConfig.unread: set explicitly, they are refused, not ignored)."""
    names = ",".join(tasks)
    own = READS
    return [(f"amber.{f}", "tasks", names, task) for task, fields in own.items() if task not in tasks
            for f in fields] if any(t in tasks for t in own) else []


def _disc_specs(suffix: str, keep) -> tuple[MetricSpec, ...]:
    def only(fn):
        return lambda s: fn(s) if keep(s) else None

    def tp(s):
        return s["read"] == "no" and s["truth"] == "no"

    return (
        MetricSpec(f"Accuracy{suffix}", "up", only(lambda s: (100.0 * s["correct"], 1))),
        MetricSpec(f"Precision{suffix}", "up", only(lambda s: (100.0 * tp(s), s["read"] == "no"))),
        MetricSpec(f"Recall{suffix}", "up", only(lambda s: (100.0 * tp(s), s["truth"] == "no"))),
        # f1 stat: 2 x col0 / (col1 + col2), so col0 in percent gives F1 in percent
        MetricSpec(f"F1{suffix}", "up", only(lambda s: (100.0 * tp(s), s["read"] == "no", s["truth"] == "no")),
                   stat="f1"),
    )


def _in(dim: str):
    return lambda s: dim in dimensions_of(s["type"])


DISC_METRICS = _disc_specs("", lambda s: True) + tuple(sp for d in DIMENSIONS for sp in _disc_specs(f"_{d}", _in(d)))
AMBER_SCORE = MetricSpec("AMBER", "up", None)


def _released_value(metric: str, table: dict) -> float:
    """The released printed number of a stored metric name (CHAIR, F1_existence, ...)."""
    if metric in table.get("generative", {}):
        return table["generative"][metric]
    name, _, dim = metric.partition("_")
    return table["discriminative" if not dim else dim][name]


def _with_released(metrics: list[MetricValue], table: dict) -> list[MetricValue]:
    return [dataclasses.replace(m, value=_released_value(m.metric, table)) for m in metrics]


# ----------------------------------------------------------------------------------------- planning

def _items(opts: AmberOptions, data, query_file: str, limit: int | None) -> list[dict]:
    """{id, path, prompt} of every query (the first `limit`), each image checked to exist."""
    rows = data.queries[query_file][:limit]
    if not rows:
        raise UserError(f"amber.data_root: {data.paths[query_file]}: no queries")
    from evalsuite.files import safe_join

    out = []
    for r in rows:
        path = safe_join(opts.image_root, r["image"], field=f"{data.paths[query_file].name}: query id {r['id']}: image")
        if not path.is_file():
            raise UserError(f"amber.image_root: {path}: missing (image of query id {r['id']} in "
                            f"{data.paths[query_file].name})")
        out.append({"id": r["id"], "path": str(path), "prompt": r["query"]})
    return out


def _plan_common(name: str, ctx: RunContext, opts: AmberOptions, need: tuple[str, ...], query_file: str,
                 generative: bool):
    from evalsuite.identity import file_fingerprint
    from evalsuite.metrics import amber

    data = amber.load_data(opts.data_root, need + (query_file,))
    amber.check_queries(data, query_file, generative)
    items = _items(opts, data, query_file, ctx.limit)
    gen = ctx.gen if opts.max_new_tokens is None else dataclasses.replace(ctx.gen, max_new_tokens=opts.max_new_tokens)
    files = [data.paths[k] for k in need + (query_file,)]
    return data, items, gen, file_fingerprint(files)


# the amber options each task reads (the section is shared: another task's option is no part of its identity)
READS = {"amber_g": ("similarity", "spacy_model", "nltk_data"), "amber_d": ("answer_rule",)}


def _resolved(ctx: RunContext, gen) -> dict:
    """What the stored config adds to the options: the run settings the answers depend on."""
    return {"limit": ctx.limit, "seed": ctx.gen.seed, "gen": gen.to_dict()}


def _identity(ctx: RunContext, data_fp: dict, items: list[dict], gen) -> dict:
    from evalsuite.identity import gen_identity, inputs_identity

    return {"data": data_fp, "query_ids": [it["id"] for it in items], "gen": gen_identity(gen),
            "inputs": inputs_identity(ctx.loader.inputs), **ctx.model_setup()}


# ------------------------------------------------------------------------------------------ tasks

class _AmberTask:
    """What both AMBER tasks share: the `amber` section, no --data-root, their answers."""
    version = "1"
    Options = AmberOptions
    section = SECTION
    reads_data_root = False
    unread = staticmethod(amber_unread)
    name: str

    def answers(self, ctx: RunContext, plan: Plan) -> list[dict] | None:
        """Each query asked with its own text, in the cache caption and chair share (`answer_items`)."""
        from evalsuite.tasks.answers import answer_items

        s = plan.state
        return answer_items(ctx, s["items"], s["gen"], s["data_id"], self.name)


class AmberGenerativeTask(_AmberTask):
    name = "amber_g"
    metrics = GEN_METRICS

    def requires(self, opts: AmberOptions, tasks: list[str]) -> tuple[str, ...]:
        return ()

    def plan(self, ctx: RunContext, opts: AmberOptions, sources: dict) -> Plan:
        """Data, images, NLTK data and the spaCy pipeline checked before any model loads."""
        from evalsuite.identity import digest
        from evalsuite.metrics import amber, nltk_resources

        need = ("annotations", "relation", "safe_words", "metrics")
        data, items, gen, data_fp = _plan_common(self.name, ctx, opts, need, "query_generative", True)
        nltk_resources.add_data_dir(opts.nltk_data, "amber.nltk_data")
        import nltk

        resources = nltk_resources.resource_checksums((nltk_resources.PUNKT, nltk_resources.TAGGER,
                                                       nltk_resources.WORDNET))
        nlp = amber.load_pipeline(opts.spacy_model)
        spacy_id = amber.pipeline_identity(nlp)
        scorer = amber.GenerativeScorer(data, amber.Similarity(nlp), opts.similarity)
        identity = {**_identity(ctx, data_fp, items, gen), "spacy": spacy_id,
                    "nltk": {"version": nltk.__version__, **{r: v["sha256"] for r, v in resources.items()}}}
        state = {"items": items, "gen": gen, "data": data, "scorer": scorer, "data_id": digest(data_fp),
                 "extra": {"spacy": spacy_id, "nltk_resources": resources, "nltk": nltk.__version__}}
        return Plan.of(self, opts, identity, _resolved(ctx, gen), state, reads=READS[self.name])

    def run(self, ctx: RunContext, plan: Plan, inputs: dict) -> TaskResult | None:
        from evalsuite.metrics.amber import released_table

        generations = self.answers(ctx, plan)
        if generations is None:
            return None
        samples = score_generative(plan, generations)
        table = released_table(samples, None, plan.state["data"].start)
        metrics = score(samples, GEN_METRICS, n_boot=plan.config["n_boot"], seed=plan.config["seed"])
        return plan.result(_with_released(metrics, table), samples, {**plan.state["extra"], "released_table": table})


def score_generative(plan: Plan, generations: list[dict]) -> list[dict]:
    s = plan.state
    return [{**g, **s["scorer"].score(g["answer"], s["data"].entry(int(g["key"]), "amber_g"))} for g in generations]


class AmberDiscriminativeTask(_AmberTask):
    name = "amber_d"
    metrics = DISC_METRICS

    def requires(self, opts: AmberOptions, tasks: list[str]) -> tuple[str, ...]:
        # the AMBER score needs CHAIR: with amber_g in the run, its answers come here too
        return ("amber_g",) if "amber_g" in tasks else ()

    def plan(self, ctx: RunContext, opts: AmberOptions, sources: dict) -> Plan:
        from evalsuite.identity import digest

        data, items, gen, data_fp = _plan_common(self.name, ctx, opts, ("annotations", "metrics"),
                                                 "query_discriminative", False)
        identity = _identity(ctx, data_fp, items, gen)
        if "amber_g" in sources:
            identity["amber_g"] = sources["amber_g"].eval_key   # the AMBER score is computed from its CHAIR
        state = {"items": items, "gen": gen, "data": data, "data_id": digest(data_fp),
                 "generative": sources.get("amber_g")}
        return Plan.of(self, opts, identity, _resolved(ctx, gen), state, reads=READS[self.name])

    def run(self, ctx: RunContext, plan: Plan, inputs: dict) -> TaskResult | None:
        from evalsuite.metrics.amber import amber_score, released_table, score_discriminative

        generations = self.answers(ctx, plan)
        if generations is None:
            return None
        s, rule = plan.state, plan.config["answer_rule"]
        samples = [{**g, **score_discriminative(g["answer"], s["data"].entry(int(g["key"]), self.name), rule)}
                   for g in generations]
        table = released_table(None, samples, s["data"].start)
        metrics = _with_released(score(samples, DISC_METRICS, n_boot=plan.config["n_boot"], seed=plan.config["seed"]), table)
        specs = DISC_METRICS
        if inputs.get("amber_g") is not None and s["generative"] is not None:
            gen_table = released_table(score_generative(s["generative"], inputs["amber_g"]), None,
                                       s["generative"].state["data"].start)
            table["generative"] = gen_table["generative"]
            metrics.append(MetricValue("AMBER", amber_score(table["generative"]["CHAIR"],
                                                            table["discriminative"]["F1"]),
                                       higher_is_better=True, n=len(samples) + len(inputs["amber_g"])))
            specs = DISC_METRICS + (AMBER_SCORE,)
        return dataclasses.replace(plan, specs=specs).result(metrics, samples, {"released_table": table})
