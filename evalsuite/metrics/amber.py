"""AMBER (Wang et al. 2023): its data files, and its generative and discriminative scoring, as the
released `inference.py` of junyangwang0410/AMBER computes them (docs/amber.md).

    data = load_data(Path("AMBER"), ("annotations", "relation", "safe_words", "metrics", "query_generative"))
    scorer = GenerativeScorer(data, Similarity(load_pipeline("en_core_web_lg")), threshold=0.8)
    record = scorer.score(response, data.annotations[query_id - 1])
    table = released_table(generative_records, discriminative_records, data.start)

Generative (ids of `generative` annotations): the response's nouns (NLTK word_tokenize, pos_tag, tags
NN*, WordNet lemma as a noun, no lower-casing) that are AMBER vocabulary (a key or a value of
relation.json) are its mentions. Per mention, in this order: a safe word (safe_words.txt) is neither
hallucinated nor covering; a word of the image's expanded truth list (each truth object's associated
words, then the truth objects themselves; the first equal entry wins) covers the object that entry
belongs to; otherwise a word of the expanded hallu list marks that hallu object as hit (Cog), then the
first hallu entry the spaCy vectors call similar (> threshold) marks its object too, then the first
truth entry called similar covers its object and the mention is not hallucinated; a mention none of
these save is hallucinated. CHAIR = hallucinated / mentions, Cover = covered truth objects / truth
objects, Hal = responses with a hallucination / responses, Cog = hit hallu objects / hallu objects.

Discriminative: the answer is read by `answer_rule` ("released": the response is exactly "Yes" or "No";
"first_word": its first word, any case, punctuation aside); "No" is the positive class: precision =
correct "No" / answered "No", recall = correct "No" / truth "no", F1 their harmonic mean. Types:
discriminative-hallucination = existence; discriminative-attribute-{state,number,action} = attribute;
every other discriminative type (discriminative-relation, relation) = relation, as released.

`released_table` is the released script's printed table: its counters start at metrics.txt's values
(0.001 for every denominator), each number is rounded to 0.1, and F1 is computed from the rounded
precision and recall with a 0.0001 term in its denominator (0.001 for existence).
"""
from __future__ import annotations

import ast
import json
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from evalsuite.errors import UserError
from evalsuite.metrics import spacy_pipeline

# the released layout under amber.data_root
FILES = {
    "annotations": "data/annotations.json",
    "relation": "data/relation.json",
    "safe_words": "data/safe_words.txt",
    "metrics": "data/metrics.txt",
    "query_generative": "data/query/query_generative.json",
    "query_discriminative": "data/query/query_discriminative.json",
}
GENERATIVE = "generative"
ATTRIBUTE_TYPES = {"discriminative-attribute-state": "state", "discriminative-attribute-number": "number",
                   "discriminative-attribute-action": "action"}
EXISTENCE_TYPE = "discriminative-hallucination"
DIMENSIONS = ("existence", "attribute", "state", "number", "action", "relation")
ANSWER_RULES = ("released", "first_word")


def dimension_of(ann_type: str) -> str:
    """existence, state, number, action or relation: where the released script counts a type."""
    if ann_type == EXISTENCE_TYPE:
        return "existence"
    return ATTRIBUTE_TYPES.get(ann_type, "relation")


def dimensions_of(ann_type: str) -> tuple[str, ...]:
    """The per-type tables a discriminative sample belongs to (an attribute type is also 'attribute')."""
    d = dimension_of(ann_type)
    return (d, "attribute") if ann_type in ATTRIBUTE_TYPES else (d,)


# ---------------------------------------------------------------------------------------------- data

@dataclass
class AmberData:
    root: Path
    paths: dict[str, Path]
    annotations: list[dict] = field(default_factory=list)
    association: dict[str, list[str]] = field(default_factory=dict)
    safe_words: list[str] = field(default_factory=list)
    start: dict[str, float] = field(default_factory=dict)       # metrics.txt: the counters' start values
    queries: dict[str, list[dict]] = field(default_factory=dict)

    def entry(self, query_id: int, where: str) -> dict:
        """The annotation of a query id: entry id-1, as released (its own id must agree)."""
        if not isinstance(query_id, int) or isinstance(query_id, bool) or not 1 <= query_id <= len(self.annotations):
            raise UserError(f"{where}: query id {query_id!r} is not in {self.paths['annotations']} "
                            f"({len(self.annotations)} entries, ids 1-{len(self.annotations)})")
        return self.annotations[query_id - 1]


def _read_json(path: Path, what: str):
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"amber.data_root: {path}: missing ({what}; docs/amber.md lists the layout)") from None
    except OSError as e:
        raise UserError(f"amber.data_root: {path}: cannot read it ({e.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"amber.data_root: {path}: not UTF-8 (byte {e.start})") from None
    from evalsuite.safeio import JSONLimitError, loads_json

    try:
        return loads_json(text, f"amber.data_root: {path}")
    except json.JSONDecodeError as e:
        raise UserError(f"amber.data_root: {path}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except JSONLimitError as e:
        raise UserError(str(e)) from None


def _read_text(path: Path, what: str) -> str:
    if not path.is_file():
        raise UserError(f"amber.data_root: {path}: missing ({what}; docs/amber.md lists the layout)")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"amber.data_root: {path}: not UTF-8 (byte {e.start})") from None


def _is_words(v) -> bool:
    return isinstance(v, list) and all(isinstance(w, str) for w in v)


def _check_annotations(path: Path, anns) -> None:
    if not isinstance(anns, list):
        raise UserError(f"amber.data_root: {path}: expected a JSON list of annotations, got {type(anns).__name__}")
    for i, a in enumerate(anns):
        where = f"amber.data_root: {path}: entry {i}"
        if not isinstance(a, dict) or not isinstance(a.get("type"), str):
            raise UserError(f"{where}: expected an object with id, type and truth")
        if a.get("id") != i + 1:   # the released script reads query id N from entry N-1
            raise UserError(f"{where}: id {a.get('id')!r}, expected {i + 1} (AMBER reads query id N from entry N-1)")
        if a["type"] == GENERATIVE:
            if not _is_words(a.get("truth")) or not _is_words(a.get("hallu")):
                raise UserError(f"{where} (id {i + 1}): a generative entry needs truth and hallu lists of words")
        elif a.get("truth") not in ("yes", "no"):
            raise UserError(f"{where} (id {i + 1}): truth {a.get('truth')!r}, expected 'yes' or 'no'")


def _parse_start(path: Path, text: str) -> dict[str, float]:
    """metrics.txt's `name=value` lines (the released script evals each value; only numbers are read here)."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.strip().split("=")
        if len(parts) != 2:
            continue   # the released reader skips such lines too
        try:
            value = ast.literal_eval(parts[1].strip())
        except (ValueError, SyntaxError):
            value = None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"amber.data_root: {path}: line {n}: {parts[1].strip()!r} is not a number")
        out[parts[0].strip()] = value
    return out


def start_keys(prefixes: tuple[str, ...]) -> list[str]:
    return [f"{p}{k}" for p in prefixes for k in ("_score", "_num")]


GEN_KEYS = start_keys(("chair", "safe_cover", "hallu_cover")) + ["non_hallu_score", "non_hallu_num"]
DISC_PREFIX = {"all": "", "state": "as_", "number": "an_", "action": "aa_", "existence": "ha_", "relation": "asso_"}
DISC_KEYS = [f"{p}qa_{k}" for p in DISC_PREFIX.values()
             for k in ("correct_score", "correct_num", "no_score", "no_num", "ans_no_score", "ans_no_num")]


def load_data(root: str | Path, need: tuple[str, ...]) -> AmberData:
    """The files of `need` (keys of FILES) under `root`, read and checked; a UserError names the first bad one."""
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"amber.data_root: {root}: no such directory")
    data = AmberData(root, {k: root / v for k, v in FILES.items()})
    if "annotations" in need:
        data.annotations = _read_json(data.paths["annotations"], "the annotations")
        _check_annotations(data.paths["annotations"], data.annotations)
    if "relation" in need:
        rel = _read_json(data.paths["relation"], "the association lists")
        if not isinstance(rel, dict) or not all(_is_words(v) for v in rel.values()):
            raise UserError(f"amber.data_root: {data.paths['relation']}: expected an object of word -> list of words")
        data.association = rel
    if "safe_words" in need:
        # as released: every line, its newline cut off (a blank line is an empty word, harmless)
        data.safe_words = [line.split("\n")[0] for line in
                           _read_text(data.paths["safe_words"], "the safe words").splitlines(keepends=True)]
    if "metrics" in need:
        path = data.paths["metrics"]
        data.start = _parse_start(path, _read_text(path, "the counters' start values"))
        keys = (GEN_KEYS if "query_generative" in need else []) + (DISC_KEYS if "query_discriminative" in need else [])
        missing = [k for k in keys if k not in data.start]
        if missing:
            raise UserError(f"amber.data_root: {path}: no line for {missing[0]} (the released metrics.txt has all "
                            f"{len(GEN_KEYS) + len(DISC_KEYS)})")
    for q in ("query_generative", "query_discriminative"):
        if q in need:
            rows = _read_json(data.paths[q], "the queries")
            if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("image"), str)
                                                     and isinstance(r.get("query"), str) for r in rows):
                raise UserError(f"amber.data_root: {data.paths[q]}: expected a list of {{id, image, query}}")
            data.queries[q] = rows
    return data


def check_queries(data: AmberData, q: str, generative: bool) -> None:
    """Every query's id names an annotation of the task's kind; a generative one's words are AMBER vocabulary."""
    where = f"amber.data_root: {data.paths[q]}"
    for row in data.queries[q]:
        entry = data.entry(row.get("id"), where)
        if (entry["type"] == GENERATIVE) != generative:
            raise UserError(f"{where}: query id {row['id']} is a {entry['type']!r} annotation, expected "
                            f"{'generative' if generative else 'a discriminative type'}")
        if generative:
            for w in entry["truth"] + entry["hallu"]:
                if w not in data.association:
                    raise UserError(f"{data.paths['annotations']}: id {row['id']}: object {w!r} is not a key of "
                                    f"{data.paths['relation']}")


# ------------------------------------------------------------------------------------ text and spaCy

def extract_nouns(text: str) -> list[str]:
    """NLTK nouns of `text`, lemmatised as nouns, case kept (the released extraction)."""
    import nltk
    from nltk.stem import WordNetLemmatizer

    lemma = WordNetLemmatizer().lemmatize
    return [lemma(w) for w, tag in nltk.pos_tag(nltk.word_tokenize(text)) if tag.startswith("NN")]


def needs_vectors(nlp) -> str | None:
    """What AMBER's synonym check misses in a pipeline: word vectors."""
    if nlp.vocab.vectors.n_keys == 0 or nlp.vocab.vectors.shape[0] == 0:
        return "the pipeline has no word vectors; AMBER's synonym check needs vectors (en_core_web_lg as released)"
    return None


def load_pipeline(name: str):
    """An installed spaCy pipeline by name, or a pipeline directory; it must have word vectors."""
    return spacy_pipeline.load_pipeline(name, "amber.spacy_model", needs_vectors, " (README, task list)")


def pipeline_identity(nlp) -> dict:
    """The pipeline's identity with a digest of its vocab folder (vectors, their key table, strings): another
    vectors table is another result."""
    return {**spacy_pipeline.pipeline_identity(nlp, "vectors", "vocab"),
            "vectors_shape": list(nlp.vocab.vectors.shape)}


class Similarity:
    """spaCy's Doc.similarity of two words, each parsed by the whole pipeline as released; both the docs
    and the comparisons are cached (the same words recur in every response)."""

    def __init__(self, nlp):
        self.nlp = nlp
        self._docs: dict[str, object] = {}
        self._pairs: dict[tuple[str, str], float] = {}

    def __call__(self, a: str, b: str) -> float:
        key = (a, b)
        if key not in self._pairs:
            with warnings.catch_warnings():    # spaCy warns for a word without a vector (similarity 0)
                warnings.simplefilter("ignore", UserWarning)
                self._pairs[key] = float(self._doc(a).similarity(self._doc(b)))
        return self._pairs[key]

    def _doc(self, word: str):
        if word not in self._docs:
            self._docs[word] = self.nlp(word)
        return self._docs[word]


# ----------------------------------------------------------------------------------------- scoring

def _expanded(objects: list[str], association: dict[str, list[str]]) -> list[tuple[str, int]]:
    """(word, index of its object): every object's associated words in object order, then the objects."""
    out = [(w, i) for i, obj in enumerate(objects) for w in association[obj]]
    return out + [(obj, i) for i, obj in enumerate(objects)]


def _first(entries: list[tuple[str, int]], pred, noun: str) -> int | None:
    """The object index of the first entry whose word w has pred(noun, w), or None."""
    return next((owner for word, owner in entries if pred(noun, word)), None)


def _equal(a: str, b: str) -> bool:
    return a == b


class GenerativeScorer:
    def __init__(self, data: AmberData, similarity, threshold: float = 0.8):
        self.association = data.association
        self.vocabulary = set(data.association) | {w for ws in data.association.values() for w in ws}
        self.safe = set(data.safe_words)
        self.similarity, self.threshold = similarity, threshold
        self._memo: dict[tuple, dict] = {}

    def similar(self, a: str, b: str) -> bool:
        return self.similarity(a, b) > self.threshold

    def score(self, response: str, entry: dict) -> dict:
        """{mentions, hallucinated, covered, cognitive, truth, hallu} of one response to one generative entry.
        mentions and hallucinated are [noun, object] pairs as CHAIR's records: the object is the truth object
        the noun covers, else the noun itself; covered / cognitive list the truth / hallu objects hit."""
        key = (response, entry["id"])
        if key not in self._memo:
            self._memo[key] = self._score(response, entry["truth"], entry["hallu"])
        return json.loads(json.dumps(self._memo[key]))   # a copy the caller may change

    def _score(self, response: str, truth: list[str], hallu: list[str]) -> dict:
        nouns = [n for n in extract_nouns(response) if n in self.vocabulary]
        truth_words, hallu_words = _expanded(truth, self.association), _expanded(hallu, self.association)
        covered, hit = [False] * len(truth), [False] * len(hallu)
        mentions, hallucinated = [], []
        for noun in nouns:
            mentions.append([noun, noun])
            if noun in self.safe:
                continue
            owner = _first(truth_words, _equal, noun)
            if owner is not None:
                covered[owner] = True
                mentions[-1][1] = truth[owner]
                continue
            # a hallu object is marked as hit both by equality and by similarity (two marks at most)
            for pred in (_equal, self.similar):
                owner = _first(hallu_words, pred, noun)
                if owner is not None:
                    hit[owner] = True
            owner = _first(truth_words, self.similar, noun)
            if owner is not None:
                covered[owner] = True
                mentions[-1][1] = truth[owner]
                continue
            hallucinated.append([noun, noun])
        return {"mentions": mentions, "hallucinated": hallucinated,
                "covered": [w for w, c in zip(truth, covered) if c], "cognitive": [w for w, h in zip(hallu, hit) if h],
                "truth": list(truth), "hallu": list(hallu)}


_FIRST_WORD = re.compile(r"[\W_]*([^\W_]+)")


def read_answer(response: str, rule: str) -> str | None:
    """'yes', 'no' or None (neither) by `rule` (ANSWER_RULES): "released" compares the whole response with
    "Yes" / "No"; "first_word" reads its first word in any case, leading spaces and punctuation skipped."""
    if rule == "released":
        return {"Yes": "yes", "No": "no"}.get(response)
    if rule == "first_word":
        m = _FIRST_WORD.match(response or "")
        word = m.group(1).lower() if m else ""
        return word if word in ("yes", "no") else None
    raise ValueError(f"unknown answer rule {rule!r}")


def score_discriminative(response: str, entry: dict, rule: str) -> dict:
    read = read_answer(response, rule)
    return {"type": entry["type"], "dimension": dimension_of(entry["type"]), "truth": entry["truth"],
            "read": read, "correct": read == entry["truth"]}


# ------------------------------------------------------------------------------- the printed table

def _r(x: float) -> float:
    return round(x, 1)


def _prf(c: dict, eps: float) -> dict:
    acc = _r(c["correct_score"] / c["correct_num"] * 100)
    p = _r(c["ans_no_score"] / c["ans_no_num"] * 100)
    r = _r(c["no_score"] / c["no_num"] * 100)
    f1 = _r(2 * (p / 100) * (r / 100) / ((p / 100) + (r / 100) + eps) * 100)
    return {"Accuracy": acc, "Precision": p, "Recall": r, "F1": f1}


def released_table(gen: list[dict] | None, disc: list[dict] | None, start: dict[str, float]) -> dict:
    """The released script's printed numbers: {"generative": {CHAIR, Cover, Hal, Cog}} for `gen` records,
    {"discriminative" | existence | attribute | state | number | action | relation: {Accuracy, Precision,
    Recall, F1}} for `disc` records."""
    out: dict[str, dict] = {}
    if gen is not None:
        c = {k: start[k] for k in GEN_KEYS}
        for s in gen:
            c["chair_score"] += len(s["hallucinated"])
            c["chair_num"] += len(s["mentions"])
            c["safe_cover_score"] += len(s["covered"])
            c["safe_cover_num"] += len(s["truth"])
            c["hallu_cover_score"] += len(s["cognitive"])
            c["hallu_cover_num"] += len(s["hallu"])
            c["non_hallu_score"] += not s["hallucinated"]
            c["non_hallu_num"] += 1
        out["generative"] = {"CHAIR": _r(c["chair_score"] / c["chair_num"] * 100),
                             "Cover": _r(c["safe_cover_score"] / c["safe_cover_num"] * 100),
                             "Hal": _r(100 - c["non_hallu_score"] / c["non_hallu_num"] * 100),
                             "Cog": _r(c["hallu_cover_score"] / c["hallu_cover_num"] * 100)}
    if disc is not None:
        groups = {g: {k: start[f"{p}qa_{k}"] for k in ("correct_score", "correct_num", "no_score", "no_num",
                                                       "ans_no_score", "ans_no_num")}
                  for g, p in DISC_PREFIX.items()}
        for s in disc:
            for g in ("all", s["dimension"]):
                c = groups[g]
                c["correct_num"] += 1
                c["correct_score"] += s["correct"]
                c["no_num"] += s["truth"] == "no"
                c["no_score"] += s["truth"] == "no" and s["read"] == "no"
                c["ans_no_num"] += s["read"] == "no"
                c["ans_no_score"] += s["read"] == "no" and s["truth"] == "no"
        out["discriminative"] = _prf(groups["all"], 0.0001)
        out["existence"] = _prf(groups["existence"], 0.001)
        attr = {k: sum(groups[g][k] for g in ("state", "number", "action")) for k in groups["state"]}
        out["attribute"] = _prf(attr, 0.0001)
        for g in ("state", "number", "action", "relation"):
            out[g] = _prf(groups[g], 0.0001)
    return out


def amber_score(chair: float, f1: float) -> float:
    """AMBER Score = (100 - CHAIR + F1) / 2, both in percent (the paper)."""
    return (100 - chair + f1) / 2
