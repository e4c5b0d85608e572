"""Task `objhal`: Object HalBench as RLAIF-V scores it: the judge extracts the objects of each answer with the
released prompt, the released rules turn them into CHAIR-style rates (evalsuite/metrics/objhal.py).

    evalsuite run --ckpt CK --tasks objhal --data-root COCO objhal.data=obj_halbench_300_with_image.jsonl \\
        objhal.spacy_model=en_core_web_trf \\
        --judge JUDGE_DIR            # or --judge http://HOST:PORT/v1 --judge-model NAME

Data: RLAIF-V's prompt file (eval/data/obj_halbench_300_with_image.jsonl: one JSON object a line with
`image_id` (a COCO id, an integer or its digits), `question` and `image` (the image, base64-encoded)), the
synonyms file RLAIF-V's script reads (eval/data/synonyms_refine.txt; evalsuite ships it, objhal.synonyms
replaces it), and the COCO 2014 annotations under
--data-root (every annotations/instances*.json and captions*.json, as the chair task finds them; the released
script unions train2014 and val2014). The model answers each question about its image (the run's decoding).

Extractors (`objhal.extractor`):
- judge (default; the published protocol): the judge of the run (`judge:` section) reads each answer of more
  than 3 words with the released extraction prompt; its reply is read with the released JSON rule. The
  extracted names go through the spaCy pipeline `objhal.spacy_model` (the released script loads
  en_core_web_trf; never downloaded), whose name, version and file digest are in the identity.
- chair: no judge; the answer's words are read as the released script reads them without --use_gpt (the
  reading of the reference captions). Another identity, and not the published protocol.

A reply the released script cannot read (it asks again until one parses) is not scored and counted
(`unparsable_rate`, extra.unparsable); more than half unparsable fails in one line and stores nothing.
Values are the numbers the released summary prints (percent; avg_len in words); CIs bootstrap per answer.
docs/judge.md.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from evalsuite.config import check_fields, opt
from evalsuite.errors import RunFailure, UserError
from evalsuite.metrics import objhal as rules
from evalsuite.tasks.base import Plan, RunContext
from evalsuite.tasks.metric_spec import MetricSpec, score
from evalsuite.types import TaskResult

log = logging.getLogger(__name__)

# the extraction prompt's own version: part of every judged objhal identity and judge cache key
PROMPT_VERSION = "objhal-rlaif-v-1"
# RLAIF-V eval/data/synonyms_refine.txt (commit 83d917b; Apache-2.0, evalsuite/data/README.md), byte-identical
RELEASED_SYNONYMS = Path(__file__).resolve().parents[1] / "data" / "objhal_synonyms_refine.txt"
MAX_UNPARSABLE_SHARE = 0.5


@dataclass
class ObjhalOptions:
    # paths are not identity: their contents are
    data: str | None = opt(None, "RLAIF-V's Object HalBench prompt file (obj_halbench_300_with_image.jsonl)",
                           path="file", identity=False, required=True)
    synonyms: str | None = opt(None, "the synonyms file RLAIF-V's script reads (null = evalsuite's copy of its "
                                     "eval/data/synonyms_refine.txt, evalsuite/data/objhal_synonyms_refine.txt)",
                               path="file", identity=False)
    extractor: Literal["judge", "chair"] = opt(
        "judge", "who finds the objects of an answer: 'judge' = the judge with the released prompt (the "
                 "published protocol); 'chair' = the released rule-based reading, no judge (not the published protocol)")
    # identity False: the pipeline enters the identity by its name, version and files' digest
    spacy_model: str = opt("en_core_web_trf", "spaCy pipeline tagging and lemmatising the judge's object names "
                                              "(extractor judge): an installed name or a directory (never downloaded)",
                           identity=False)
    tokenizer: Literal["nltk38", "nltk310"] = opt(
        "nltk38", "word tokenizer rules of the captions: NLTK <= 3.8's or 3.10's (evalsuite/metrics/chair_tokenize.py)")
    nltk_data: str | None = opt(None, "an NLTK data dir searched first", path="dir", identity=False)
    cache_dir: str | None = opt(None, "ground-truth cache dir (null = ~/.cache/evalsuite/objhal_gt)", identity=False)
    n_boot: int = opt(1000, "bootstrap resamples of the confidence intervals (0 = none)", identity=False, ge=0)

    def __post_init__(self) -> None:
        check_fields(self, "objhal")
        if self.nltk_data is not None and not Path(self.nltk_data).is_dir():
            raise UserError(f"objhal.nltk_data: {self.nltk_data}: no such directory")


def _rate(fn):
    """A row of scored answers only (an unparsable reply is in no rate)."""
    return lambda s: fn(s) if s["parsed"] else None


# rows in percent, so the bootstrap's values are on the printed scale
METRICS = (
    MetricSpec("CHAIRs_refine", "down", _rate(lambda s: (100.0 * s["CHAIRs"], bool(s["mentions"])))),
    MetricSpec("CHAIRi", "down", _rate(lambda s: (100.0 * len(s["hallucinated"]), len(s["mentions"])))),
    MetricSpec("correct_rate", "up", _rate(lambda s: (100.0 * (bool(s["mentions"]) - s["CHAIRs"]), bool(s["mentions"])))),
    MetricSpec("object_correct_rate", "up",
               _rate(lambda s: (100.0 * (len(s["mentions"]) - len(s["hallucinated"])), len(s["mentions"])))),
    MetricSpec("obj_rec", "up", _rate(lambda s: (100.0 * len(s["recalled"]), len(s["gt_objects"])))),
    MetricSpec("CHAIRs", "down", _rate(lambda s: (100.0 * s["CHAIRs"], 1))),
    MetricSpec("avg_len", "none", _rate(lambda s: (s["n_words"], 1))),
    MetricSpec("unparsable_rate", "none", lambda s: (float(not s["parsed"]), 1), ci=False),
)


def load_records(path: str | Path) -> list[dict]:
    """{line, image_id, question, image (bytes)} of every line; a problem is one line naming file, line and field."""
    from evalsuite.files import read_json_records

    p = Path(path)
    if not p.is_file():
        raise UserError(f"objhal.data: {p}: no such file")
    rows = read_json_records(p, "objhal.data", jsonl=True)
    if not rows:
        raise UserError(f"objhal.data: {p}: no records")
    out = []
    for where, rec in rows:
        if not isinstance(rec, dict):
            raise UserError(f"objhal.data: {where}: not a JSON object")
        imid = rec.get("image_id")
        if isinstance(imid, str) and imid.strip().isdigit() and imid.strip().isascii():
            imid = int(imid)
        if isinstance(imid, bool) or not isinstance(imid, int) or imid < 0:
            raise UserError(f"objhal.data: {where}: field 'image_id' missing or not a COCO image id (an integer)")
        q = rec.get("question")
        if not isinstance(q, str) or not q.strip():
            raise UserError(f"objhal.data: {where}: field 'question' missing or not a non-empty string")
        img = rec.get("image")
        if not isinstance(img, str) or not img.strip():
            raise UserError(f"objhal.data: {where}: field 'image' missing or not a string (the image, base64)")
        try:
            raw = base64.b64decode("".join(img.split()), validate=True)   # line-wrapped base64 too
        except (binascii.Error, ValueError):
            raise UserError(f"objhal.data: {where}: field 'image' is not valid base64") from None
        out.append({"line": int(where.rsplit(":", 1)[1]), "image_id": imid, "question": q, "image": raw})
    return out


def check_image(rec: dict, where: str) -> str:
    """The image decodes (a damaged one fails now, not mid-generation); its sha256 (16 hex)."""
    import hashlib

    from evalsuite.images import open_rgb

    try:
        open_rgb(rec["image"], f"{where}: field 'image'")
    except UserError as e:
        raise UserError(f"objhal.data: {e}") from None
    return hashlib.sha256(rec["image"]).hexdigest()[:16]


def _cached_gt(cache_dir: str | None, key: str, build) -> tuple[dict[int, list[str]], set[int]]:
    """The ground truth of these images from the cache (keyed by the annotation files', synonyms' and NLTK
    data's content, the tokenizer and the image ids), else built and cached: COCO 2014's train annotations
    alone are ~0.5 GB of JSON."""
    from evalsuite.files import write_bytes_atomic
    from evalsuite.metrics.chair_io import default_cache_dir

    folder = Path(cache_dir) if cache_dir else default_cache_dir().parent / "objhal_gt"
    path = folder / f"objhal_gt_{key}.json"
    if path.is_file():
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            return {int(k): v for k, v in doc["gt"].items()}, set(doc["known"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            log.warning("objhal: %s unreadable; building the ground truth again", path)
    gt, known = build()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, json.dumps({"gt": {str(k): v for k, v in gt.items()},
                                             "known": sorted(i for i in gt if i in known)}).encode())
    except OSError as e:
        log.warning("objhal: ground-truth cache %s not written (%s)", path, e)
    return gt, {i for i in gt if i in known}


class ObjhalTask:
    name = "objhal"
    version = "1"
    Options = ObjhalOptions
    metrics = METRICS
    # reads the judge: section with extractor judge only (run_config.sections_for): with extractor chair a
    # --judge is refused as without effect, unless another task of the run reads it
    uses_judge = staticmethod(lambda opts: opts.extractor == "judge")

    def requires(self, opts: ObjhalOptions, tasks: list[str]) -> tuple[str, ...]:
        return ()

    def plan(self, ctx: RunContext, opts: ObjhalOptions, sources: dict) -> Plan:
        """Data, images, annotations, NLTK data, spaCy and the judge checked before the model loads."""
        from evalsuite.identity import (
            digest,
            file_fingerprint,
            file_sha256,
            gen_identity,
            inputs_identity,
        )
        from evalsuite.metrics import nltk_resources
        from evalsuite.metrics.chair_io import coco_annotation_files
        from evalsuite.metrics.chair_tokenize import Tokenizer, get_tokenizer

        if not opts.synonyms:   # the released file (its content, not its path, is in the identity)
            opts = dataclasses.replace(opts, synonyms=str(RELEASED_SYNONYMS))
        if ctx.data_root is None:
            raise UserError("objhal: needs --data-root (a folder with the COCO 2014 annotations/instances_*.json "
                            "and captions_*.json)")
        judged = opts.extractor == "judge"
        if not judged and opts.spacy_model != ObjhalOptions.spacy_model:
            raise UserError("objhal.spacy_model: only read with objhal.extractor=judge; drop it")
        get_tokenizer(opts.tokenizer, "objhal.tokenizer")
        vocab = rules.Vocab.load(opts.synonyms)
        records = load_records(opts.data)[: ctx.limit]
        items = [{**r, "index": i, "image_sha": check_image(r, f"{opts.data}:{r['line']}")}
                 for i, r in enumerate(records)]
        nltk_resources.add_data_dir(opts.nltk_data, "objhal.nltk_data")
        resources = nltk_resources.resource_checksums((nltk_resources.PUNKT, nltk_resources.WORDNET))
        tokenize, lemmatize = Tokenizer(opts.tokenizer), rules.wordnet_noun_lemmatizer()
        instances, captions = coco_annotation_files(Path(ctx.data_root))
        ids = sorted({it["image_id"] for it in items})
        gt_key = digest({"files": file_fingerprint([*instances, *captions]), "synonyms": file_sha256(opts.synonyms),
                         "tokenizer": opts.tokenizer, "nltk": {r: v["sha256"] for r, v in resources.items()},
                         "ids": ids, "schema": 1}, 32)
        gt, known = _cached_gt(opts.cache_dir, gt_key, lambda: rules.build_gt(instances, captions, set(ids), vocab,
                                                                              tokenize, lemmatize))
        for it in items:
            if it["image_id"] not in known:
                raise UserError(f"objhal.data: {opts.data}:{it['line']}: image_id {it['image_id']} is in no "
                                f"annotation file under {ctx.data_root} (COCO 2014 train+val)")
        data_id = file_sha256(opts.data)[:16]
        identity = {"data": data_id, "n": len(items), "synonyms": file_sha256(opts.synonyms)[:16],
                    "annotations": file_fingerprint([*instances, *captions]),
                    "nltk": {r: v["sha256"] for r, v in resources.items()},
                    "gen": gen_identity(ctx.gen), "inputs": inputs_identity(ctx.loader.inputs), **ctx.model_setup()}
        extra = {"extractor": opts.extractor, "nltk_resources": resources,
                 "published_protocol": judged}
        state = {"items": items, "data_id": data_id, "vocab": vocab, "gt": gt, "tokenize": tokenize,
                 "lemmatize": lemmatize, "extra": extra}
        resolved = {"limit": ctx.limit, "seed": ctx.gen.seed, "gen": ctx.gen.to_dict()}
        if judged:
            from evalsuite.judge.judge import Judge

            judge = Judge.resolve(ctx.judge, "objhal")
            nlp = rules.load_pipeline(opts.spacy_model)
            spacy_id = rules.pipeline_identity(nlp)
            identity.update(spacy=spacy_id, judge={**judge.identity, "prompt": PROMPT_VERSION})
            resolved.update(judge=judge.describe(), judge_prompt=PROMPT_VERSION)
            extra.update(spacy=spacy_id, judge=judge.describe(), judge_prompt=PROMPT_VERSION)
            state.update(nlp=nlp, judge=judge)
        log.debug("objhal: %d prompts, GT of %d images", len(items), len(gt))
        return Plan.of(self, opts, identity, resolved, state)

    def answers(self, ctx: RunContext, plan: Plan) -> list[dict] | None:
        """The model's answer to every prompt (rank 0: all, in file order; other ranks: None), resumable:
        `answer_items` in objhal's own cache, the image given as its decoded bytes."""
        from evalsuite.tasks.answers import answer_items

        items = plan.state["items"]
        records = answer_items(ctx, [{"id": it["index"], "path": it["image"], "prompt": it["question"],
                                      "image_sha": it["image_sha"], "image_id": it["image_id"]} for it in items],
                               ctx.gen, plan.state["data_id"], self.name, namespace="objhal")
        if records is None:
            return None
        line = {str(it["index"]): it["line"] for it in items}
        # the image is the file's line (its bytes stay out of the stored rows)
        return [{**{k: v for k, v in r.items() if k != "image"}, "line": line[r["key"]]} for r in records]

    def run(self, ctx: RunContext, plan: Plan, inputs: dict) -> TaskResult | None:
        from evalsuite.tasks.answers import scored_on_rank0

        return scored_on_rank0(ctx, self.answers(ctx, plan), lambda answers: self.scored(ctx, plan, answers))

    def scored(self, ctx: RunContext, plan: Plan, answers: list[dict]) -> TaskResult:
        s = plan.state
        judged = plan.config["extractor"] == "judge"
        samples = [{**a, "caption": rules.clean_answer(a["answer"])} for a in answers]
        if judged:
            extracted_of(s["judge"], samples, ctx)
        else:
            for smp in samples:
                words, mentions = s["vocab"].caption_words(s["tokenize"](smp["caption"]), s["lemmatize"])
                smp.update(objects=words, mention_list=mentions, parsed=True)
        for smp in samples:
            if judged and smp["parsed"]:
                smp["objects"] = rules.refine_objects(smp["extracted"], s["nlp"], s["vocab"])
                smp["mention_list"] = s["vocab"].mentions(smp["objects"])
            mentions = smp.pop("mention_list", [])
            smp.update(rules.score_response(mentions, s["gt"][smp["image_id"]]), n_words=rules.word_count(smp["caption"]))
        bad = [x for x in samples if not x["parsed"]]
        n_judged = sum(1 for x in samples if not x.get("short", True))   # replies the judge gave
        if len(bad) > MAX_UNPARSABLE_SHARE * n_judged:
            raise RunFailure(f"objhal: {len(bad)} of {n_judged} judge replies are no JSON list of objects (more "
                             f"than {MAX_UNPARSABLE_SHARE:.0%}); nothing stored. Sample reply: "
                             f"{bad[0]['judge_text'][:160]!r}")
        good = [x for x in samples if x["parsed"]]
        released = rules.released_values(good)
        metrics = score(samples, METRICS, n_boot=plan.config["n_boot"], seed=ctx.gen.seed)
        kept = []
        for m in metrics:   # the value the released script prints; none where it divides by zero
            value = released["printed"].get(m.metric, m.value)
            if value is not None:
                kept.append(dataclasses.replace(m, value=value))
        extra = {**s["extra"], "unparsable": len(bad), "scored": len(good),
                 "overall": released["overall"]}
        if judged:
            extra.update(judged=n_judged,
                         short_answers=sum(1 for x in samples if x["short"]),
                         judge_requests=dict(s["judge"].stats))
        return plan.result(kept, samples, extra)


def extracted_of(judge, samples: list[dict], ctx: RunContext) -> None:
    """Each sample's judge reply and extracted names (`extracted`, `parsed`); short answers are not sent."""
    for smp in samples:
        smp["short"] = rules.is_short(smp["caption"])
    ask = [smp for smp in samples if not smp["short"]]
    requests = [[{"role": "system", "content": rules.render_prompt(smp["prompt"], smp["caption"])}] for smp in ask]
    replies = judge.ask(requests, ctx.resume_root, "objhal", PROMPT_VERSION, ctx.output_dir) if requests else []
    for smp in samples:
        smp.update(judge_text="", judge_model="", extracted=[], parsed=True)
    for smp, reply in zip(ask, replies):
        found = rules.parse_object_list(reply["content"])
        smp.update(judge_text=reply["content"], judge_model=reply.get("model", ""),
                   extracted=found if found is not None else [], parsed=found is not None)

