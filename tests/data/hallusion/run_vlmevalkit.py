"""Runs VLMEvalKit's HallusionBench scoring (commit e8e78f05, unmodified: vlmeval/dataset/utils/yorn.py
YOrN_Extraction, YOrN_auxeval, Hallusion_rating) on cases.json. The glue is ImageYORNDataset.evaluate's
(vlmeval/dataset/image_yorn.py) restated: extraction of every prediction, YOrN_auxeval for the Unknown
ones with a judge that answers attempt k with the record's constructed match_replies[k] (and records the
prompt and temperature it was asked with), score = answer == extracted, then Hallusion_rating on the
stored table. The TSV's `index` is built as CATEGORY_SUBCATEGORY_VISUALINPUT_SETID_FIGUREID_QUESTIONID
(Hallusion_rating reads parts 3..5 only), `category` = category, `l2-category` = subcategory,
`answer` = Yes for gt_answer 1 else No. Writes reference/vlmevalkit.json.

    PYTHONPATH=/work/ref/VLMEvalKit VENV/bin/python run_vlmevalkit.py cases.json reference/vlmevalkit.json
"""
import json
import sys
import tempfile

import pandas as pd
from vlmeval.dataset.utils.yorn import Hallusion_rating, YOrN_auxeval, YOrN_Extraction


class RecordedJudge:
    """The judge's side of YOrN_auxeval: model.generate(prompt, temperature) -> the next constructed reply."""

    def __init__(self, replies):
        self.replies, self.calls = list(replies), []

    def generate(self, prompt, temperature=0):
        self.calls.append({"prompt": prompt, "temperature": temperature})
        return self.replies[len(self.calls) - 1]


# more answers for YOrN_Extraction alone: punctuation, digit commas, more than 32 lone periods
EXTRACTION = [
    "Yes", "no", "YES.", "No!", "yes, no", "Yes-ish", "no_way", "yes/no", "1,000 yes", "yes,no 1,2", "(no)",
    "yes;", "; yes", "[yes]", "no.", "yes.no", "yes . no", "3.5 yes", "Not at all.", "Nope", "nO, YeS",
    "yes" + "." * 40, "." * 33 + "yes.no", "e.g. yes", "Yes\nNo", "No\n\nyes", "yes\tno", "", " ", "yesno",
    "'yes'", "yes'", "\u201cyes\u201d", "yes:", "Answer: No.", "It's a no.", "NO/YES", "no-", "-no", "no -",
]


def main(cases_path: str, out_path: str) -> None:
    with open(cases_path) as f:
        cases = json.load(f)
    index = ["_".join([c["category"], c["subcategory"], c["visual_input"], c["set_id"], c["figure_id"],
                       c["question_id"]]) for c in cases]
    data = pd.DataFrame({"index": index, "question": [c["question"] for c in cases],
                         "answer": ["Yes" if c["gt_answer"] == "1" else "No" for c in cases],
                         "category": [c["category"] for c in cases],
                         "l2-category": [c["subcategory"] for c in cases],
                         "prediction": [str(c["model_prediction"]) for c in cases]})
    first = {k: YOrN_Extraction(v) for k, v in zip(data["index"], data["prediction"])}
    ans_map, calls = dict(first), {}
    for i, k in enumerate(data["index"]):
        if ans_map[k] == "Unknown":
            judge = RecordedJudge(cases[i]["match_replies"])
            ans_map[k] = YOrN_auxeval(judge, data.iloc[i])
            calls[k] = judge.calls
    data["extracted"] = [ans_map[x] for x in data["index"]]
    data["score"] = data["answer"] == data["extracted"]
    with tempfile.TemporaryDirectory() as tmp:
        storage = f"{tmp}/HallusionBench_auxmatch.pkl"
        data.to_pickle(storage)
        table = Hallusion_rating(storage)
    out = {"rating": table.to_dict(orient="records"),
           "extraction": [[t, YOrN_Extraction(t)] for t in EXTRACTION],
           "rows": [{"index": k, "rule": first[k], "extracted": ans_map[k], "judge_calls": calls.get(k, [])}
                    for k in data["index"]]}
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    print(table.to_string())


if __name__ == "__main__":
    main(*sys.argv[1:])
