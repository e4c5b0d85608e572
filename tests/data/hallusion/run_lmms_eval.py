"""Runs lmms-eval's own hallusion_bench_image scoring (the installed lmms_eval 0.7.3, unmodified) on cases.json:
hb_process_results per record, then hb_aggregation_result_aAcc / _fAcc / _qAcc, whose evaluate_by_chatgpt
asks an OpenAI-compatible server (OPENAI_API_URL): here tests/judge_fake.py, answering each prompt with the
record's constructed `judge_reply`. Writes reference/lmms_eval.json: the three printed values, the prompts
the judge got, and the per-record correctness codes lmms-eval saved (gpt_response/*.json).

    PYTHONPATH=REPO /work/main/.venv/bin/python run_lmms_eval.py cases.json reference/lmms_eval.json
"""
import json
import os
import sys
import tempfile
from types import SimpleNamespace

from tests.judge_fake import FakeJudge


def main(cases_path: str, out_path: str) -> None:
    with open(cases_path) as f:
        cases = json.load(f)
    by_prompt_key = {(c["question"], c["gt_answer_details"]): c for c in cases}

    def reply(messages):
        prompt = messages[-1]["content"]
        q = prompt.split("Question:", 1)[1].split("\nReference answer: ", 1)
        ref = q[1].split("\nPrediction answer:", 1)[0]
        return by_prompt_key[(q[0], ref)]["judge_reply"]

    with FakeJudge(reply=reply) as fake, tempfile.TemporaryDirectory() as tmp:
        os.environ["OPENAI_API_URL"] = fake.url + "/chat/completions"
        os.environ["OPENAI_API_KEY"] = "unused"
        from lmms_eval.tasks.hallusion_bench import evaluate_hb

        docs = [{k: v for k, v in c.items() if k not in ("model_prediction", "judge_reply", "match_replies")}
                for c in cases]
        per_metric = [evaluate_hb.hb_process_results(d, [c["model_prediction"]]) for d, c in zip(docs, cases)]
        args = SimpleNamespace(output_path=tmp)
        values = {}
        for metric, fn in (("aAcc", evaluate_hb.hb_aggregation_result_aAcc),
                           ("fAcc", evaluate_hb.hb_aggregation_result_fAcc),
                           ("qAcc", evaluate_hb.hb_aggregation_result_qAcc)):
            values[metric] = fn([r[metric] for r in per_metric], args)
        saved = []
        for part in ("vd", "vs"):
            with open(f"{tmp}/gpt_response/hallusion_output_{part}_model.json") as f:
                saved += json.load(f)
        prompts = [r["messages"][-1]["content"] for r in fake.requests]
        out = {"values": values, "requests": len(fake.requests), "max_tokens": fake.requests[0]["max_tokens"],
               "prompts": prompts,
               "codes": [{k: s[k] for k in ("category", "subcategory", "set_id", "figure_id", "question_id",
                                            "gpt4v_output_gpt_check")} for s in saved]}
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    print(json.dumps(values))


if __name__ == "__main__":
    main(*sys.argv[1:])
