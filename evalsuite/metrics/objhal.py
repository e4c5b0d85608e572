"""Object HalBench's rules (RLAIF-V eval/eval_gpt_obj_halbench.py and eval/summarize_gpt_obj_halbench_review.py,
RLHF-V/RLAIF-V commit 83d917b), written from the released scripts; tests/unit/test_objhal_reference.py
compares every number with the released scripts' own output (tests/data/objhal/README.md).

Per response (the model's answer with "Assistant:" removed and stripped, `clean_answer`):
- extractor "judge" (the published protocol): an answer of 3 words or fewer (whitespace split) has no
  objects and is not sent; otherwise the judge gets EXTRACTION_PROMPT as one system message and its reply
  is read by `parse_object_list`. Each extracted name is parsed by spaCy as "a NAME": the two-word COCO
  names among its lemmas (`double_words_only`) if any, else its runs of nouns (tags NN, NNS, NNP, NNPS) as
  lemma phrases (`noun_runs`); the phrases of a response are deduplicated in order (`refine_objects`).
- extractor "chair": the released script without --use_gpt: the response's words as the ground-truth
  captions are read (`Vocab.caption_words`). Not the published protocol.
Then the phrases that are COCO words (`Vocab.mentions`, the toilet/seat rule first) are compared with the
image's ground truth: COCO instance categories plus the COCO words of its reference captions
(`Vocab.caption_words`: NLTK word tokens of the lower-cased caption, WordNet noun lemmas, two-word merge).

Rates (`released_values`, as `compute_chair` computes them, x 100 as the summary prints them):
CHAIRs_refine = hallucinating responses / responses with a COCO word; CHAIRi = hallucinated mentions /
mentions; correct_rate = 1 - CHAIRs_refine; object_correct_rate = 1 - CHAIRi; obj_rec = distinct correct
categories summed over responses / GT categories summed over responses; CHAIRs = hallucinating responses /
responses; avg_len = mean of len(answer.strip().split(" ")).
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from evalsuite.errors import UserError
from evalsuite.metrics import spacy_pipeline
from evalsuite.metrics.chair import merge_pairs

# The released extraction prompt (RLAIF-V eval/eval_gpt_obj_halbench.py `prompt_template`, commit 83d917b),
# verbatim: the judge is asked exactly what the published numbers asked. It is judge input data.
EXTRACTION_PROMPT = """You are an expert in image objects extraction according to a question answer pair. We asked an examiner to answer a question about a picture.

[Start of Question]

<image> {question}

[End of Question]

[Start of Examiner's Answer]

{answer}

[End of Examiner's Answer]


Assume that the answer is correct, please identify all visible objects that are directly shown in the image. Please following the instructions in below:

1. You should only mention objects that are explicitly mentioned in the examiner's answer.
2. You should only extract the object names without the attributes of the objects.
3. You should not include the properties of the object, like the color, material, etc. as part of the object name in your result.
4. Make your answer precise. Present the results in a JSON list format: ["object_1", ..., "object_n"].
5. You should return an empty JSON list () if no visible objects can be found.
"""

NOUN_TAGS = ("NNP", "NNPS", "NN", "NNS")
# the released script's extra two-word names beside the synonyms file's own
EXTRA_DOUBLE_WORDS = ("home plate", "train track")
ANIMAL_WORDS = ("bird", "cat", "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "animal", "cub")
VEHICLE_WORDS = ("jet", "train")
FIXED_PAIRS = {"bow tie": "tie", "toilet seat": "toilet", "wine glas": "wine glass"}


def render_prompt(question: str, answer: str) -> str:
    """The judge's message: the question replaced first, then the answer (a question holding the text
    "{answer}" has it replaced too, as released)."""
    return EXTRACTION_PROMPT.replace("{question}", question).replace("{answer}", answer)


def clean_answer(text: str) -> str:
    return text.replace("Assistant:", "").strip()


def is_short(answer: str) -> bool:
    """3 whitespace-separated words or fewer: no objects, the judge is not asked."""
    return len(answer.strip().split()) <= 3


def word_count(answer: str) -> int:
    """The released length: pieces of the stripped answer split on single spaces."""
    return len(answer.strip().split(" "))


def parse_object_list(content: str):
    """The released reading of a judge reply: the whole reply as JSON, else (when it holds '["') its last
    line as JSON. Returns the list, or None where the released script raises (and asks again) and where
    the JSON is not a list (the released script would iterate a string's characters or a dict's keys, or
    crash on a number or null)."""
    try:
        value = json.loads(content)
    except ValueError:
        if '["' not in content:
            return None
        try:
            value = json.loads(content.strip().split("\n")[-1])
        except ValueError:
            return None
    return value if isinstance(value, list) else None


@dataclass(frozen=True)
class Vocab:
    """RLAIF-V's synonyms (eval/data/synonyms_refine.txt) and its two-word table."""

    word_to_category: dict[str, str]
    double_words: dict[str, str]

    @classmethod
    def parse(cls, text: str) -> Vocab:
        """Each line stripped and split on ", ", every item stripped: the first item is the category, every
        item maps to its line's first (a word on several lines maps to the last)."""
        import io

        w2c: dict[str, str] = {}
        for line in io.StringIO(text, newline=None).readlines():   # the released file.readlines()
            items = [s.strip() for s in line.strip().split(", ")]
            for s in items:
                w2c[s] = items[0]
        doubles = {w: w for w in w2c if len(w.strip().split(" ")) >= 2}
        doubles.update((w, w) for w in EXTRA_DOUBLE_WORDS)
        for a in ANIMAL_WORDS:
            doubles[f"baby {a}"] = a
            doubles[f"adult {a}"] = a
        for v in VEHICLE_WORDS:
            doubles[f"passenger {v}"] = v
        doubles.update(FIXED_PAIRS)
        return cls(w2c, doubles)

    @classmethod
    def load(cls, path: str | Path, flag: str = "objhal.synonyms") -> Vocab:
        p = Path(path)
        try:
            text = p.read_bytes().decode("utf-8")
        except FileNotFoundError:
            raise UserError(f"{flag}: {p}: no such file") from None
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"{flag}: {p}: unreadable ({e})") from None
        vocab = cls.parse(text)
        if len([c for c in set(vocab.word_to_category.values()) if c]) < 2:
            raise UserError(f"{flag}: {p}: not a synonyms file (lines of 'category, synonym, ...'; RLAIF-V "
                            "eval/data/synonyms_refine.txt)")
        return vocab

    def mentions(self, words: list[str]) -> list[tuple[str, str]]:
        """(word, category) of every COCO word, in order, duplicates kept; with both "toilet" and "seat"
        present every "seat" goes first."""
        if "toilet" in words and "seat" in words:
            words = [w for w in words if w != "seat"]
        return [(w, self.word_to_category[w]) for w in words if w in self.word_to_category]

    def caption_words(self, tokens: list[str], lemmatize) -> tuple[list[str], list[tuple[str, str]]]:
        """(merged words, mentions) of a tokenized lower-cased caption, each token lemmatized first."""
        merged = merge_pairs([lemmatize(t) for t in tokens], self.double_words)
        return merged, self.mentions(merged)


def noun_runs(doc) -> list[str]:
    """Runs of noun-tagged tokens of a spaCy doc, each the run's lemmas joined by spaces."""
    out, run = [], ""
    for token in doc:
        if token.tag_ in NOUN_TAGS:
            run += f" {token.lemma_}"
        elif run != "":
            out.append(run.strip())
            run = ""
    if run != "":
        out.append(run.strip())
    return out


def needs_tags_and_lemmas(nlp) -> str | None:
    """What the released rules miss in a pipeline: part-of-speech tags and lemmas."""
    doc = nlp("a dog")
    if not any(t.tag_ for t in doc) or not any(t.lemma_ for t in doc):
        return ("the pipeline sets no part-of-speech tags or lemmas (on 'a dog'); the released rules read both "
                "(en_core_web_trf as released)")
    return None


def load_pipeline(name: str):
    """An installed spaCy pipeline by name, or a pipeline directory, that tags and lemmatises."""
    return spacy_pipeline.load_pipeline(name, "objhal.spacy_model", needs_tags_and_lemmas,
                                        " (objhal.extractor=judge reads it; or objhal.extractor=chair)")


def pipeline_identity(nlp) -> dict:
    """The pipeline's identity with a digest of all its files."""
    return spacy_pipeline.pipeline_identity(nlp, "files")


def refine_objects(extracted: list, nlp, vocab: Vocab) -> list[str]:
    """The object phrases of one response from the judge's list (deduplicated, in order)."""
    found: list[str] = []
    for item in extracted:
        doc = nlp(f"a {item}")
        doubles = merge_pairs([t.lemma_ for t in doc], vocab.double_words, keep_single=False)
        found += doubles if doubles else noun_runs(doc)
    return list(dict.fromkeys(found))


def score_response(mentions: list[tuple[str, str]], gt: Iterable[str]) -> dict:
    """The per-response record of `compute_chair`."""
    gt_set = frozenset(gt)
    hallucinated = [[w, c] for w, c in mentions if c not in gt_set]
    recalled = sorted({c for _, c in mentions if c in gt_set})
    return {"mentions": [[w, c] for w, c in mentions], "hallucinated": hallucinated, "gt_objects": sorted(gt_set),
            "recalled": recalled, "CHAIRs": int(bool(hallucinated)),
            "CHAIRi": len(hallucinated) / float(len(mentions)) if mentions else 0.0}


def released_values(samples: list[dict]) -> dict[str, float | None]:
    """`compute_chair`'s overall metrics and the summary's printed scale (x 100) from scored samples
    ({mentions, hallucinated, recalled, gt_objects, CHAIRs, n_words}), with the released float operations;
    None where the released script divides by zero."""
    def ratio(a, b):
        return a / b if b else None

    num_caps = float(len(samples))
    num_coco = float(sum(1 for s in samples if s["mentions"]))
    num_hall = float(sum(s["CHAIRs"] for s in samples))
    hall_words = float(sum(len(s["hallucinated"]) for s in samples))
    coco_words = float(sum(len(s["mentions"]) for s in samples))
    recalled = float(sum(len(s["recalled"]) for s in samples))
    gt_words = float(sum(len(s["gt_objects"]) for s in samples))
    words = sum(s["n_words"] for s in samples)
    chair_s, refine, chair_i = ratio(num_hall, num_caps), ratio(num_hall, num_coco), ratio(hall_words, coco_words)
    obj_rec = ratio(recalled, gt_words)
    overall = {"CHAIRs": chair_s, "CHAIRs_refine": refine, "CHAIRi": chair_i, "obj_rec": obj_rec,
               "sentence_num": num_caps, "coco_sentence_num": num_coco, "coco_word_count": recalled,
               "gt_word_count": gt_words, "avg_word_len": ratio(float(words), num_caps),
               "correct_rate": None if refine is None else 1 - refine,
               "object_correct_rate": None if chair_i is None else 1 - chair_i,
               "hallucinated_word_count": hall_words, "mention_count": coco_words}
    printed = {k: None if overall[k] is None else overall[k] * 100
               for k in ("CHAIRs", "CHAIRs_refine", "CHAIRi", "correct_rate", "object_correct_rate", "obj_rec")}
    printed["avg_len"] = overall["avg_word_len"]
    return {"overall": overall, "printed": printed}


def summary_text(overall: dict) -> str:
    """The lines summarize_gpt_obj_halbench_review.py prints for one review (after its header lines)."""
    m = overall
    return (f"Response Hall   : {m['CHAIRs_refine'] * 100:.2f}\n"
            f"Object Hall     : {m['CHAIRi'] * 100:.2f}\n\n"
            f"Response Correct: {m['correct_rate'] * 100:.2f}\n"
            f"Object Correct  : {m['object_correct_rate'] * 100:.2f}\n"
            f"Object Recall   : {m['obj_rec'] * 100:.2f}\n"
            f"Average Length  : {m['avg_word_len']:.2f}\n"
            f"COCO Sent Number: {m['coco_sentence_num']}\n"
            f"COCO Word Number: {m['coco_word_count']}\n"
            f"GT Word Number  : {m['gt_word_count']}")


# ------------------------------------------------------------------------------------------- ground truth

def wordnet_noun_lemmatizer():
    """WordNetLemmatizer().lemmatize (noun, the released call), memoised per word."""
    import functools

    from nltk.stem import WordNetLemmatizer

    fn = functools.lru_cache(maxsize=1 << 17)(WordNetLemmatizer().lemmatize)
    fn("dogs")   # WordNet loads lazily: pay it now
    return fn


def read_coco(path: Path) -> dict:
    from evalsuite.safeio import read_json_file

    doc = read_json_file(path, f"--data-root: {path}")
    if not isinstance(doc, dict) or not isinstance(doc.get("annotations"), list) or \
            not isinstance(doc.get("images"), list):
        raise UserError(f"--data-root: {path}: not a COCO annotation file (no 'images' and 'annotations' lists)")
    return doc


def build_gt(instances: list[Path], captions: list[Path], image_ids: set[int], vocab: Vocab, tokenize,
             lemmatize) -> tuple[dict[int, list[str]], set[int]]:
    """({image id: sorted GT categories} of `image_ids`, the ids the files list as images): instance
    categories (mapped through the synonyms) plus the COCO words of the image's reference captions."""
    gt: dict[int, set[str]] = {i: set() for i in image_ids}
    known: set[int] = set()
    for path in instances:
        doc = read_coco(path)
        names = {c.get("id"): c.get("name") for c in doc.get("categories", []) if isinstance(c, dict)}
        known.update(int(im["id"]) for im in doc["images"] if isinstance(im, dict) and "id" in im)
        for a in doc["annotations"]:
            try:
                imid = int(a["image_id"])
            except (KeyError, TypeError, ValueError):
                raise UserError(f"--data-root: {path}: an annotation without an integer image_id") from None
            if imid in gt:
                name = names.get(a.get("category_id"))
                if name not in vocab.word_to_category:
                    raise UserError(f"--data-root: {path}: category {name!r} (id {a.get('category_id')}) is not in "
                                    "the synonyms file (objhal.synonyms)")
                gt[imid].add(vocab.word_to_category[name])
    for path in captions:
        doc = read_coco(path)
        known.update(int(im["id"]) for im in doc["images"] if isinstance(im, dict) and "id" in im)
        for a in doc["annotations"]:
            imid = a.get("image_id") if isinstance(a, dict) else None
            if isinstance(imid, int) and imid in gt:
                if not isinstance(a.get("caption"), str):
                    raise UserError(f"--data-root: {path}: annotation {a.get('id')}: 'caption' is not a string")
                _, mentions = vocab.caption_words(tokenize(a["caption"]), lemmatize)
                gt[imid].update(c for _, c in mentions)
    return {k: sorted(v) for k, v in gt.items()}, known
