"""HallusionBench's scoring rules, in the two released forms (evalsuite/tasks/hallusion.py, docs/judge.md).

judge mode (lmms-eval 0.7.3 `hallusion_bench_image`, tasks/hallusion_bench/utils.py + evaluate_hb.py):
- the judge gets JUDGE_TEMPLATE (question, gt_answer_details, the model's answer); its reply is
  0 "incorrect" when the lower-cased reply contains `incorrect`, else 1 "correct" when it contains `correct`,
  else 2 "unclear" (what lmms-eval also assigns to a failed request). A reply with neither `correct` nor
  `unclear` in it is scored 2 as released and counted here as unparsable.
- a question is correct when its code is 1; in category VS with figure_id 0 (no figure) also when it is 2.
- aAcc = 100 x correct / questions; fAcc = 100 x share of figures (category, subcategory, set_id, figure_id)
  whose questions are all correct, VS figure 0 left out; qAcc = 100 x share of questions (category,
  subcategory, set_id, question_id) correct on every figure. lmms-eval prints round(value, 4).

rule mode (VLMEvalKit e8e78f05, vlmeval/dataset/utils/yorn.py and image_yorn.py):
- the answer's Yes/No is `yorn_extract` (lower-case, VLMEvalKit's punctuation rule, split on whitespace:
  `yes` without `no` -> Yes, `no` without `yes` -> No, else Unknown); an Unknown goes to the judge with
  MATCH_TEMPLATE, up to MATCH_ATTEMPTS times (temperature + 0.5 x attempt) until `yorn_extract` of the
  reply is not Unknown. Correct = the extraction equals Yes/No of gt_answer (1 -> Yes).
- aAcc as above; fAcc groups by (subcategory, set_id, figure_id) and qAcc by (subcategory, set_id,
  question_id): VLMEvalKit's keys (its `l2-category` is the subcategory) carry no category, so VD and VS
  groups of one subcategory and ids are one group there; per category they are grouped within it.
  Nothing is left out of fAcc.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

CATEGORIES = ("VD", "VS")
MODES = ("judge", "rule")
MATCH_ATTEMPTS = 5

# lmms-eval's judge prompt (evaluate_by_chatgpt), verbatim: the judge is asked what the published numbers asked
JUDGE_TEMPLATE = (
    "Imagine you are an intelligent teacher. Thoroughly read the question, reference answer and the prediction "
    "answer to ensure a clear understanding of the information provided. Assess the correctness of the "
    "predictions. If the prediction answer does not conflict with the reference answer, please generate "
    "\u201ccorrect\u201d. If the prediction answer conflict with the reference answer, please generate "
    "\u201cincorrect\u201d. If the prediction answer is unclear about the answer, please generate \"unclear\". "
    "\n\n Question:{question}\nReference answer: {reference}\nPrediction answer:{prediction}\nOutput:"
)

# VLMEvalKit's YOrN_match_prompt, verbatim (its question is followed by "?" as released)
MATCH_TEMPLATE = (
    "You are an AI assistant who will help me to match an answer with two options of a question. "
    "The options are only Yes / No. "
    "You are provided with a question and an answer, "
    "and you need to find which option (Yes / No) is most similar to the answer. "
    "If the meaning of all options are significantly different from the answer, output Unknown. "
    "Your should output a single word among the following 3 choices: Yes, No, Unknown.\n"
    "Example 1: \n"
    "Question: Is the word in this image 'Hello'?\nAnswer: The word in this image is 'Hello'.\nYour output: Yes\n"
    "Example 2: \n"
    "Question: Is the word in this image 'Hello'?\n"
    "Answer: The word in this image is not 'Hello'.\nYour output: No\n"
    "Example 3: \n"
    "Question: {question}?\nAnswer: {prediction}\nYour output: "
)


def judge_prompt(question: str, reference: str, prediction: str) -> str:
    # plain concatenation, as released: braces in the texts are not format fields
    head, rest = JUDGE_TEMPLATE.split("{question}")
    mid, rest = rest.split("{reference}")
    mid2, tail = rest.split("{prediction}")
    return head + question + mid + reference + mid2 + prediction + tail


def match_prompt(question: str, prediction: str) -> str:
    head, rest = MATCH_TEMPLATE.split("{question}")
    mid, tail = rest.split("{prediction}")
    return head + question + mid + prediction + tail


def judge_code(reply: str) -> tuple[int, bool]:
    """(0 incorrect | 1 correct | 2 unclear, parsed): lmms-eval's reading of a judge reply; parsed is False
    when the reply says none of correct / incorrect / unclear (scored 2 all the same)."""
    low = reply.lower()
    if "incorrect" in low:
        return 0, True
    if "correct" in low:
        return 1, True
    return 2, "unclear" in low


def judged_correct(category: str, figure_id: str, code: int) -> bool:
    """lmms-eval's assign_correctness: without a figure (VS, figure 0) not knowing counts as correct."""
    if category == "VS" and str(figure_id) == "0":
        return code in (1, 2)
    return code == 1


_PUNCT = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!")
_DIGIT_COMMA = re.compile(r"(\d)(,)(\d)")
_LONE_PERIOD = re.compile(r"(?<!\d)\.(?!\d)")
# VLMEvalKit passes re.UNICODE (32) where re.sub takes its count: only the first 32 lone periods go
_PERIODS_REMOVED = 32


def process_punctuation(text: str) -> str:
    """VLMEvalKit's punctuation rule: each mark is deleted when the text has it beside a space or has a
    digit,digit anywhere, else replaced by a space; then periods not between digits are deleted."""
    out = text
    digit_comma = _DIGIT_COMMA.search(text) is not None
    for p in _PUNCT:
        out = out.replace(p, "" if (p + " " in text or " " + p in text or digit_comma) else " ")
    return _LONE_PERIOD.sub("", out, count=_PERIODS_REMOVED)


def yorn_extract(text: str) -> str:
    """Yes / No / Unknown: VLMEvalKit's YOrN_Extraction."""
    words = process_punctuation(text.lower()).split()
    yes, no = "yes" in words, "no" in words
    if yes and not no:
        return "Yes"
    if no and not yes:
        return "No"
    return "Unknown"


def gt_word(gt_answer: str) -> str:
    return "Yes" if str(gt_answer) == "1" else "No"


def figure_key(s: dict, mode: str, within_category: bool = False) -> str | None:
    """The figure a question belongs to for fAcc; None: left out (judge mode, VS figure 0)."""
    if mode == "judge" and s["category"] == "VS" and str(s["figure_id"]) == "0":
        return None
    cat = [s["category"]] if mode == "judge" or within_category else []
    return "_".join([*cat, s["subcategory"], str(s["set_id"]), str(s["figure_id"])])


def question_key(s: dict, mode: str, within_category: bool = False) -> str:
    cat = [s["category"]] if mode == "judge" or within_category else []
    return "_".join([*cat, s["subcategory"], str(s["set_id"]), str(s["question_id"])])


def mark_groups(samples: list[dict], mode: str) -> None:
    """Each group's verdict (all of its questions correct) on its first sample, for the per-sample rows of
    fAcc / qAcc (the group is the pairing unit: one row per group, on the same sample in every run):
    s["fig_all"] / s["q_all"] (overall grouping) and s["cat_fig_all"] / s["cat_q_all"] (within the
    sample's category); None on the other samples of a group."""
    for field, key_fn, within in (("fig_all", figure_key, False), ("q_all", question_key, False),
                                  ("cat_fig_all", figure_key, True), ("cat_q_all", question_key, True)):
        groups: dict[str, list[dict]] = {}
        for s in samples:
            k = key_fn(s, mode, within)
            s[field] = None
            if k is not None:
                groups.setdefault(k, []).append(s)
        for members in groups.values():
            members[0][field] = all(m["correct"] for m in members)


def released_scores(samples: Iterable[dict], mode: str) -> dict[str, float]:
    """{aAcc, fAcc, qAcc} in percent of non-empty `samples`, straight from the released definitions (no
    per-sample rows): what the released code returns, beside the values computed from the rows."""
    samples = list(samples)
    figs: dict[str, list[bool]] = {}
    qs: dict[str, list[bool]] = {}
    for s in samples:
        k = figure_key(s, mode)
        if k is not None:
            figs.setdefault(k, []).append(bool(s["correct"]))
        qs.setdefault(question_key(s, mode), []).append(bool(s["correct"]))
    out = {"aAcc": 100 * sum(bool(s["correct"]) for s in samples) / len(samples),
           "qAcc": 100 * sum(all(v) for v in qs.values()) / len(qs)}
    if figs:    # only VS figure-0 questions (judge mode): no figure to score
        out["fAcc"] = 100 * sum(all(v) for v in figs.values()) / len(figs)
    return out
