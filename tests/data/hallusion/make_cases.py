"""Constructs the HallusionBench cases the released scoring code is run on (README.md): cases.json, a list of
records in the released HallusionBench.json fields plus `model_prediction` (the model's answer), `judge_reply`
(lmms-eval mode: the judge's reply to the correctness prompt) and `match_replies` (VLMEvalKit mode: the
judge's replies to the Yes/No match prompt, attempt by attempt, asked while its extraction is Unknown).

    python make_cases.py > cases.json
"""
import json
import random

# (category, subcategory, set_id, figure_ids, visual_input per figure, question_ids)
LAYOUT = [
    ("VD", "illusion", "0", ["0", "1"], ["1", "2"], ["0", "1"]),
    ("VD", "illusion", "1", ["0", "1"], ["1", "2"], ["0"]),
    ("VD", "ocr", "0", ["0", "1"], ["1", "2"], ["0", "1"]),      # VS ocr 0 below shares subcategory and ids
    ("VD", "math", "2", ["0", "1", "2"], ["1", "2", "2"], ["0", "1"]),
    ("VS", "ocr", "0", ["0", "1", "2"], ["0", "1", "2"], ["0", "1"]),   # figure 0: no figure (visual_input 0)
    ("VS", "chart", "3", ["0", "1", "2"], ["0", "1", "2"], ["0", "1", "2"]),
    ("VS", "map", "1", ["1", "2"], ["1", "2"], ["0"]),
]

PREDICTIONS = [
    "Yes.", "No.", "Yes, it is.", "No, it is not.", "YES!", "no", "Yes and no.", "I cannot tell.", "",
    "The answer is no.", "It is yes, 1,000 times.", "no-one knows", "Not sure; maybe yes.", "(yes)",
    "yes/no", "Yes... no.", "Nope.", "Definitely not.", "No it isn't, yes.", "yes.no", "Sure, yes",
    "no.\nThe image shows a cat.", "Is it? Yes", "y e s", "No, 1,5 is wrong.",
]
JUDGE_REPLIES = [
    "correct", "Incorrect", "\u201ccorrect\u201d", "unclear", "The prediction is not correct.", "INCORRECT.",
    "", "I don't know.", "correct or incorrect", "Unclear.", "The answer is right.", "Correct!",
]
MATCH_REPLIES = ["Yes", "No", "Unknown", "yes.", "I am not sure", "No, no.", "Yes and no", "", "NO!"]


def main() -> None:
    rng = random.Random(39)
    records = []
    for cat, sub, set_id, figs, vis, qids in LAYOUT:
        for fig, v in zip(figs, vis):
            for q in qids:
                gt = rng.choice(["0", "1"])
                pred = rng.choice(PREDICTIONS)
                records.append({
                    "category": cat, "subcategory": sub, "visual_input": v, "set_id": set_id, "figure_id": fig,
                    "sample_note": f"{sub} {set_id}", "question_id": q,
                    "question": f"Is statement {set_id}.{q} about the {cat} {sub} true",
                    "gt_answer_details": f"In figure {fig} the statement is {'true' if gt == '1' else 'false'}.",
                    "gt_answer": gt,
                    "filename": None if v == "0" else f"./hallusion_bench/{cat}/{sub}/{set_id}_{fig}.png",
                    "model_prediction": pred,
                    "judge_reply": rng.choice(JUDGE_REPLIES),
                    "match_replies": [rng.choice(MATCH_REPLIES) for _ in range(5)],
                })
    # every prediction and every reply at least once, and a reply that is asked all five times
    for i, p in enumerate(PREDICTIONS):
        records[i % len(records)]["model_prediction"] = p
    for i, r in enumerate(JUDGE_REPLIES):
        records[(3 * i + 1) % len(records)]["judge_reply"] = r
    records[8]["model_prediction"] = "I cannot tell."
    records[8]["match_replies"] = ["Unknown", "", "maybe", "Yes and no", "I am not sure"]
    # a judge prompt names its record (question: category, subcategory, set, question; reference: figure)
    assert len({(r["question"], r["gt_answer_details"]) for r in records}) == len(records)
    print(json.dumps(records, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
