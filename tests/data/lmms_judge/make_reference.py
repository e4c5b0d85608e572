"""Writes reference.json: lmms-eval 0.7.3's own judged-task scoring, unmodified, on the recorded judge
replies of cases.json (README.md). Run from the repository root with the project's venv:

    PYTHONPATH=. python tests/data/lmms_judge/make_reference.py

lmms-eval's task utils modules are executed from the installed package as lmms-eval itself loads them
(`!function`: spec_from_file_location + exec_module), with its judge settings in the environment
(API_TYPE=openai, OPENAI_API_URL, OPENAI_API_KEY, MODEL_VERSION), so its own OpenAIProvider (openai
client) asks tests/judge_fake.py, which answers the recorded replies. Nothing of lmms-eval is patched.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ANSWER = "A model answer."
VERSION = ""   # the model's answer in every judge prompt (the scores depend on the replies only)


def load_utils(task_dir: str, module: str = "utils"):
    import lmms_eval

    path = Path(lmms_eval.__file__).parent / "tasks" / task_dir / f"{module}.py"
    spec = importlib.util.spec_from_file_location(module, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, path


def main() -> None:
    sys.path.insert(0, str(HERE.parents[2]))
    from tests.judge_fake import FakeJudge, canned_replies

    cases = json.loads((HERE / "cases.json").read_text())
    every = [c for task_cases in cases.values() for c in task_cases]
    out: dict = {}
    with FakeJudge(models=("judge-a",), reply_body=canned_replies(every)) as fake:
        os.environ.update({"API_TYPE": "openai", "OPENAI_API_URL": fake.url, "OPENAI_API_KEY": "not-a-key",
                           "MODEL_VERSION": "judge-a"})
        from importlib.metadata import version

        import lmms_eval

        global VERSION
        VERSION = version("lmms_eval")
        mmvet, path = load_utils("mmvet")
        start = len(fake.requests)
        rows = [mmvet.mmvet_process_results({k: c[k] for k in ("question_id", "question", "answer", "capability")},
                                            [ANSWER])["gpt_eval_score"] for c in cases["mmvet"]]
        out["mmvet"] = {
            "source": f"lmms_eval {VERSION} {path.relative_to(Path(lmms_eval.__file__).parent)}",
            "per_doc": [{"question_id": r["question_id"], "score": r["score"]} for r in rows],
            "metrics": {"gpt_eval_score": mmvet.mmvet_aggregate_results(rows)},
            "requests": _requests(fake.requests[start:], cases["mmvet"]),
        }
        for task, folder, fields in (
                ("llava_in_the_wild", "llava-in-the-wild", ("question_id", "question", "category", "gpt_answer", "caption")),
                ("llava_bench_coco", "llava-bench-coco", ("question_id", "question", "category", "answer", "gpt_answer",
                                                          "caption"))):
            llava, path = load_utils(folder)
            start = len(fake.requests)
            docs = [{k: c[k] for k in fields} for c in cases[task]]
            per = [llava.llava_process_results(d, [ANSWER]) for d in docs]
            aggs = {"gpt_eval_llava_all": llava.llava_all_aggregation,
                    "gpt_eval_llava_conv": llava.llava_conv_aggregation,
                    "gpt_eval_llava_detail": llava.llava_detail_aggregation,
                    "gpt_eval_llava_complex": llava.llava_complex_aggregation}
            out[task] = {
                "source": f"lmms_eval {VERSION} {path.relative_to(Path(lmms_eval.__file__).parent)}",
                "per_doc": [{"question_id": d["question_id"], "scores": p["gpt_eval_llava_all"]["scores"],
                             "review": p["gpt_eval_llava_all"]["review"]} for d, p in zip(docs, per)],
                "metrics": {m: fn([p[m] for p in per]) for m, fn in aggs.items()},
                "requests": _requests(fake.requests[start:], cases[task]),
            }
        # hallusion_bench_image: process_results keeps the document; each aggregation asks the judge (the
        # first; the others re-read the json it saved under lmms-eval's --output_path)
        import argparse
        import tempfile

        hb, path = load_utils("hallusion_bench", "evaluate_hb")
        start = len(fake.requests)
        fields = ("category", "subcategory", "set_id", "figure_id", "visual_input", "question_id", "question",
                  "gt_answer", "gt_answer_details")
        docs = [{k: c[k] for k in fields} for c in cases["hallusion_bench_image"]]
        per = [hb.hb_process_results(d, [ANSWER]) for d in docs]
        args = argparse.Namespace(output_path=tempfile.mkdtemp(prefix="hallusion-ref-"))
        metrics = {m: getattr(hb, f"hb_aggregation_result_{m}")([p[m] for p in per], args)
                   for m in ("aAcc", "qAcc", "fAcc")}   # the yaml's metric_list order
        out["hallusion_bench_image"] = {
            "source": f"lmms_eval {VERSION} {path.relative_to(Path(lmms_eval.__file__).parent)}",
            "per_doc": [{"marker": c["marker"], "gpt4v_output_gpt_check": p["aAcc"].get("gpt4v_output_gpt_check")}
                        for c, p in zip(cases["hallusion_bench_image"], per)],
            "metrics": metrics,
            "requests": _requests(fake.requests[start:], cases["hallusion_bench_image"]),
        }
    (HERE / "reference.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({t: v["metrics"] for t, v in out.items()}))


def _requests(bodies: list[dict], cases: list[dict]) -> list[dict]:
    """What the judge was asked, in order: the case, temperature and max_tokens of each request."""
    out = []
    for b in bodies:
        text = b["messages"][-1]["content"]
        marker = next(c["marker"] for c in cases if c["marker"] in text)
        out.append({"case": marker, "temperature": b.get("temperature"), "max_tokens": b.get("max_tokens")})
    return out


if __name__ == "__main__":
    main()
