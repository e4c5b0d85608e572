"""Task `hallusion`: HallusionBench, scored by its rules (aAcc, fAcc, qAcc) in one of two named variants.

    evalsuite run --ckpt CK --tasks hallusion hallusion.data=HallusionBench.json hallusion.image_root=DIR \\
        --judge JUDGE_DIR [hallusion.mode=rule]      # or --judge http://HOST:PORT/v1 --judge-model NAME

Data: the released HallusionBench.json (a list of {category, subcategory, visual_input, set_id, figure_id,
sample_note, question_id, question, gt_answer_details, gt_answer, filename}); the image of a record is
IMAGE_ROOT/<filename> (the released relative path, ./hallusion_bench/VD/ocr/0_0.png: IMAGE_ROOT is the
folder holding hallusion_bench/). Records with visual_input 0 (no image) are not asked: lmms-eval's
hallusion_bench_image scores the dataset's `image` split, the questions with an image, and VLMEvalKit
sends every row with its image (extra.no_image_skipped counts them). The model under
test answers the question as it is (both released tasks add no instruction).

Modes (evalsuite/metrics/hallusion.py holds the rules):
- `judge` (default; lmms-eval `hallusion_bench_image`, whose judge prompt and rules are the HallusionBench
  authors' evaluation code): the judge reads each answer against gt_answer_details and says correct /
  incorrect / unclear; a reply with none of them is scored "unclear" as released and counted unparsable.
- `rule` (VLMEvalKit's HallusionBench): the answer's Yes/No by VLMEvalKit's word rule; only answers it
  cannot classify go to the judge (VLMEvalKit's match prompt, up to 5 attempts, temperature + 0.5 per
  attempt); a judged answer whose last reply is still not Yes/No counts as wrong, and a reply that names
  none of Yes / No / Unknown is counted unparsable.
aAcc, fAcc, qAcc overall and per category (VD, VS), in percent, with bootstrap CIs over the per-sample
rows: fAcc / qAcc have one row per figure / question group (on its first record), so pairs and resamples
are groups. More than half of the judgments unparsable: the task fails in one line and stores nothing.

The result's identity holds the mode, the judge's identity and the mode's judge-prompt version (the
judge is part of a rule-mode result too: it decides the answers the rule cannot). docs/judge.md.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from evalsuite.config import check_fields, opt
from evalsuite.errors import RunFailure, UserError
from evalsuite.metrics import hallusion as hb
from evalsuite.tasks.base import Plan, RunContext
from evalsuite.tasks.metric_spec import MetricSpec, score
from evalsuite.types import TaskResult

log = logging.getLogger(__name__)

ID_FIELDS = ("category", "subcategory", "set_id", "figure_id", "question_id")
TEXT_FIELDS = ("question", "gt_answer_details")
# the judge prompt's own version per mode: part of every hallusion identity and judge cache key
PROMPT_VERSION = {"judge": "hallusion-lmms-eval-0.7.3-1", "rule": "hallusion-vlmevalkit-e8e78f05-1"}
MAX_UNPARSABLE_SHARE = 0.5


def _group_row(field: str, category: str | None = None):
    def row(s):
        if s.get(field) is None or (category is not None and s["category"] != category):
            return None
        return (100.0 * bool(s[field]), 1)
    return row


def _answer_row(category: str | None = None):
    return lambda s: None if category is not None and s["category"] != category else (100.0 * bool(s["correct"]), 1)


def _specs(suffix: str, category: str | None) -> tuple[MetricSpec, ...]:
    within = category is not None
    return (MetricSpec(f"aAcc{suffix}", "up", _answer_row(category)),
            MetricSpec(f"fAcc{suffix}", "up", _group_row("cat_fig_all" if within else "fig_all", category)),
            MetricSpec(f"qAcc{suffix}", "up", _group_row("cat_q_all" if within else "q_all", category)))


METRICS = _specs("", None) + tuple(sp for c in hb.CATEGORIES for sp in _specs(f"_{c}", c)) + (
    MetricSpec("unparsable_rate", "none",
               lambda s: (float(not s["parsed"]), 1) if s.get("parsed") is not None else None, ci=False),
)


def summarize(samples: list[dict], mode: str, n_boot: int = 0, seed: int = 0) -> dict:
    """{metric: value} of scored samples ({category, subcategory, set_id, figure_id, question_id, correct,
    parsed (judged ones)}), plus the count of unparsable judgments. Fills each sample's groups and rows."""
    hb.mark_groups(samples, mode)
    out = {m.metric: m.value for m in score(samples, METRICS, n_boot=n_boot, seed=seed)}
    out["unparsable"] = sum(s.get("parsed") is False for s in samples)
    return out


@dataclass
class HallusionOptions:
    # paths are not identity: the file's and the images' contents are (a moved copy is the same data)
    data: str | None = opt(None, "HallusionBench's released HallusionBench.json", path="file", identity=False,
                             required=True)
    image_root: str | None = opt(None, "the folder its `filename` paths are relative to (holds hallusion_bench/)",
                                 path="dir", identity=False, required=True)
    mode: Literal["judge", "rule"] = opt(
        "judge", "judge = lmms-eval's hallusion_bench_image (the judge decides every answer's correctness); "
                 "rule = VLMEvalKit's (Yes/No by rule, the judge only for answers the rule cannot read)")
    n_boot: int = opt(1000, "bootstrap resamples of the confidence intervals (0 = none)", identity=False, ge=0)

    def __post_init__(self) -> None:
        check_fields(self, "hallusion")


def _id_value(v) -> str | None:
    """The released file's ids are strings ("0"); an int is the same id."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return str(v)
    return v if isinstance(v, str) and v.strip() else None


def load_records(path: str | Path) -> list[dict]:
    """The file's records, each field checked (ids as strings); one line naming file, record and field."""
    from evalsuite.safeio import read_json_file

    p = Path(path)
    if not p.is_file():
        raise UserError(f"hallusion.data: {p}: no such file")
    data = read_json_file(p, f"hallusion.data: {p}")
    if not isinstance(data, list) or not data:
        raise UserError(f"hallusion.data: {p}: expected a non-empty JSON list of records")
    out, seen = [], {}
    for i, rec in enumerate(data):
        where = f"hallusion.data: {p}: record {i}"
        if not isinstance(rec, dict):
            raise UserError(f"{where} is not an object")
        r = dict(rec)
        for f in (*ID_FIELDS, "visual_input", "gt_answer"):
            v = _id_value(rec.get(f))
            if v is None:
                raise UserError(f"{where}: field {f!r} missing or not a non-empty string")
            r[f] = v
        if r["category"] not in hb.CATEGORIES:
            raise UserError(f"{where}: field 'category' is {r['category']!r}; HallusionBench's are VD and VS")
        if r["gt_answer"] not in ("0", "1"):
            raise UserError(f"{where}: field 'gt_answer' is {r['gt_answer']!r}, not '0' or '1'")
        for f in TEXT_FIELDS:
            if not isinstance(rec.get(f), str) or (f == "question" and not rec[f].strip()):
                raise UserError(f"{where}: field {f!r} missing or not {'a non-empty ' if f == 'question' else 'a '}"
                                "string")
        if r["visual_input"] != "0" and not (isinstance(rec.get("filename"), str) and rec["filename"].strip()):
            raise UserError(f"{where}: field 'filename' missing or not a string (visual_input {r['visual_input']} "
                            "has an image)")
        key = "_".join(r[f] for f in ID_FIELDS)
        if key in seen:
            raise UserError(f"{where}: the same category/subcategory/set_id/figure_id/question_id ({key}) as "
                            f"record {seen[key]}")
        seen[key] = i
        r["key"] = key
        out.append(r)
    return out


def image_path(root: Path, rec: dict, index: int) -> Path:
    from evalsuite.files import safe_join

    rel = rec["filename"].strip().removeprefix("./")
    path = safe_join(root, rel, field=f"hallusion.data: record {index}: filename")
    if not path.is_file():
        raise UserError(f"hallusion.image_root: {path}: no such file (record {index}, filename {rec['filename']!r})")
    return path


class HallusionTask:
    name = "hallusion"
    version = "1"
    Options = HallusionOptions
    metrics = METRICS
    uses_judge = True        # reads the judge: section (run_config.sections_for)
    reads_data_root = False  # hallusion.data / hallusion.image_root

    def requires(self, opts: HallusionOptions, tasks: list[str]) -> tuple[str, ...]:
        return ()

    def plan(self, ctx: RunContext, opts: HallusionOptions, sources: dict) -> Plan:
        """Data, images and the judge checked, and the judge's identity stated, before the model loads."""
        from evalsuite.identity import digest, file_sha256, gen_identity, inputs_identity
        from evalsuite.judge.judge import Judge

        root = Path(opts.image_root)
        if not root.is_dir():
            raise UserError(f"hallusion.image_root: {root}: no such directory")
        records = load_records(opts.data)
        asked = [(i, r) for i, r in enumerate(records) if r["visual_input"] != "0"]
        if not asked:
            raise UserError(f"hallusion.data: {opts.data}: no record with an image (visual_input 1 or 2)")
        skipped = len(records) - len(asked)
        items = []
        for i, rec in asked[: ctx.limit]:
            path = image_path(root, rec, i)
            items.append({**rec, "index": i, "id": i, "path": str(path), "prompt": rec["question"],
                          "image_sha": file_sha256(path)[:16]})
        judge = Judge.resolve(ctx.judge, "hallusion")
        prompt_version = PROMPT_VERSION[opts.mode]
        data_id = digest([file_sha256(opts.data), [it["image_sha"] for it in items]])
        identity = {"data": file_sha256(opts.data)[:16], "images": digest([it["image_sha"] for it in items]),
                    "n": len(items), "gen": gen_identity(ctx.gen), "inputs": inputs_identity(ctx.loader.inputs),
                    **ctx.model_setup(), "judge": {**judge.identity, "prompt": prompt_version}}
        resolved = {"limit": ctx.limit, "seed": ctx.gen.seed, "gen": ctx.gen.to_dict(), "judge": judge.describe(),
                    "judge_prompt": prompt_version}
        state = {"items": items, "data_id": data_id, "judge": judge, "skipped": skipped}
        return Plan.of(self, opts, identity, resolved, state=state)

    def answers(self, ctx: RunContext, plan: Plan) -> list[dict] | None:
        """The model's answer to every asked question (rank 0: all, in file order; other ranks: None)."""
        from evalsuite.tasks.answers import answer_items

        return answer_items(ctx, plan.state["items"], ctx.gen, plan.state["data_id"], self.name)

    def run(self, ctx: RunContext, plan: Plan, inputs: dict) -> TaskResult | None:
        from evalsuite.tasks.answers import scored_on_rank0

        return scored_on_rank0(ctx, self.answers(ctx, plan), lambda answers: self.judged(ctx, plan, answers))

    def judged(self, ctx: RunContext, plan: Plan, answers: list[dict]) -> TaskResult:
        mode = plan.config["mode"]
        items, judge = plan.state["items"], plan.state["judge"]
        version = PROMPT_VERSION[mode]
        # key: the record's index in the file (the answers' key); record: its released ids joined
        samples = [{**a, "record": it["key"], **{f: it[f] for f in (*ID_FIELDS, "visual_input", "question",
                                                                     "gt_answer_details", "gt_answer", "filename")}}
                   for it, a in zip(items, answers)]
        stats = {"asked": 0, "cached": 0}
        with judge.session():
            if mode == "judge":
                self._judge_all(ctx, judge, version, samples, stats)
            else:
                self._match_unknown(ctx, judge, version, samples, stats)
        judged = [s for s in samples if s.get("parsed") is not None]
        bad = [s for s in judged if not s["parsed"]]
        if len(bad) > MAX_UNPARSABLE_SHARE * len(judged):
            what = "correct / incorrect / unclear" if mode == "judge" else "Yes / No / Unknown"
            raise RunFailure(f"hallusion: {len(bad)} of {len(judged)} judge replies say none of {what} (more than "
                             f"{MAX_UNPARSABLE_SHARE:.0%}); nothing stored. Sample reply: {bad[0]['judge_text'][:160]!r}")
        hb.mark_groups(samples, mode)
        metrics = score(samples, METRICS, n_boot=plan.config["n_boot"], seed=plan.config["seed"])
        released = {k: round(v, 4) for k, v in hb.released_scores(samples, mode).items()} \
            if mode == "judge" else hb.released_scores(samples, mode)
        return plan.result(metrics, samples, {
            "mode": mode, "released": released, "unparsable": len(bad), "judged": len(judged),
            "no_image_skipped": plan.state["skipped"], "judge": plan.config["judge"], "judge_prompt": version,
            "judge_requests": stats})

    @staticmethod
    def _ask(ctx, judge, version, prompts, stats, temperature=None) -> list[str]:
        requests = [[{"role": "user", "content": p}] for p in prompts]
        replies = judge.ask(requests, ctx.resume_root, "hallusion", version, ctx.output_dir, temperature=temperature)
        for k in stats:
            stats[k] += judge.stats[k]
        return [r["content"] for r in replies]

    def _judge_all(self, ctx, judge, version, samples, stats) -> None:
        prompts = [hb.judge_prompt(s["question"], s["gt_answer_details"], s["answer"]) for s in samples]
        for s, reply in zip(samples, self._ask(ctx, judge, version, prompts, stats)):
            code, parsed = hb.judge_code(reply)
            s.update(judge_text=reply, judge_code=code, parsed=parsed,
                     correct=hb.judged_correct(s["category"], s["figure_id"], code))

    def _match_unknown(self, ctx, judge, version, samples, stats) -> None:
        for s in samples:
            s["extracted"] = s["rule_extracted"] = hb.yorn_extract(s["answer"])
            s["judge_replies"] = []
        open_ = [s for s in samples if s["extracted"] == "Unknown"]
        for attempt in range(hb.MATCH_ATTEMPTS):
            if not open_:
                break
            temperature = judge.config.temperature + 0.5 * attempt
            prompts = [hb.match_prompt(s["question"], s["answer"]) for s in open_]
            for s, reply in zip(open_, self._ask(ctx, judge, version, prompts, stats, temperature)):
                s["judge_replies"].append(reply)
                s["extracted"] = hb.yorn_extract(reply)
            open_ = [s for s in open_ if s["extracted"] == "Unknown"]
        for s in samples:
            s["correct"] = s["extracted"] == hb.gt_word(s["gt_answer"])
            if s["judge_replies"]:
                last = s["judge_replies"][-1]
                s["judge_text"] = last
                s["parsed"] = s["extracted"] != "Unknown" or "unknown" in hb.process_punctuation(last.lower()).split()
