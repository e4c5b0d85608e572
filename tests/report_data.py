"""Stores for the report and table tests, with records in the tasks' own shapes and stored metrics and
per-sample values computed by the tasks' declared metric specs (as real runs store them): CHAIR
(metrics.chair.score_caption), relevance, POPE and MME (lmms-eval's per-document results), CSR pairs and
CSR training logs (training/csr/train_log.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from evalsuite.store import Store
from evalsuite.tasks.chair import METRICS as CHAIR_METRICS
from evalsuite.lmms.metrics import declare
from evalsuite.tasks.metric_spec import score, specs_extra
from evalsuite.tasks.relevance import METRICS as RELEVANCE_METRICS
from evalsuite.types import MetricValue, TaskResult

SETTINGS = ("random", "popular", "adversarial")


def pope_records(answers: list[str], objects=("dog", "cat", "car", "cup")) -> list[dict]:
    """Question i: setting SETTINGS[i // (n/3)], truth "yes" for even i; `answers[i]` the model's."""
    n = len(answers)
    out = []
    for i, ans in enumerate(answers):
        truth = "yes" if i % 2 == 0 else "no"
        q = f"Is there a {objects[i % len(objects)]} in the image?"
        res = {"question_id": str(i), "score": float(ans == truth), "prediction": ans, "ground_truth": truth}
        out.append({"key": f"pope/{i}", "doc_id": i, "image_id": str(i), "image": f"img_{i // 2:03d}",
                    "prompt": q + "\nAnswer the question using a single word or phrase.", "answer": ans,
                    "target": truth, "doc": {"question_id": str(i), "question": q, "answer": truth,
                                             "image_source": f"img_{i // 2:03d}",
                                             "category": SETTINGS[i * 3 // n]},
                    **{m: dict(res) for m in ("pope_accuracy", "pope_precision", "pope_recall", "pope_f1_score",
                                              "pope_yes_ratio")}})
    return out


def pope_result(answers: list[str]) -> TaskResult:
    """lmms-eval's aggregates (lmms_eval/tasks/pope/utils.py) over `pope_records(answers)`."""
    recs = pope_records(answers)
    said = [r["answer"] == "yes" for r in recs]
    truth = [r["target"] == "yes" for r in recs]
    tp = sum(s and t for s, t in zip(said, truth))
    n = len(recs)
    prec = tp / sum(said) if sum(said) else 0.0
    rec = tp / sum(truth)
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    acc = sum(r["pope_accuracy"]["score"] for r in recs) / n
    metrics = [MetricValue("pope_accuracy", acc, True, n), MetricValue("pope_precision", prec, True, n),
               MetricValue("pope_recall", rec, True, n), MetricValue("pope_f1_score", f1, True, n),
               MetricValue("pope_yes_ratio", sum(truth) / n, True, n)]
    return declare(TaskResult("pope", "0.0", metrics, samples=recs, identity={"data": "pope-test"}))


def mme_result(scores: dict[tuple[str, str], tuple[float, float]]) -> TaskResult:
    """{(category, image): (score of question 1, of question 2)} -> MME records and perception score:
    per category the mean over images of 100 * correct / 2 + 100 * both."""
    recs, per = [], {}
    for (cat, img), pair in scores.items():
        for j, s in enumerate(pair):
            q = f"Is there a {cat} thing in this image? Please answer yes or no."
            truth = "Yes" if j == 0 else "No"
            answer = truth if s else ("No" if truth == "Yes" else "Yes")
            recs.append({"key": f"mme/{len(recs)}", "doc_id": len(recs), "image_id": f"{cat}/{img}", "image": None,
                         "prompt": q, "answer": answer, "target": truth,
                         "doc": {"question_id": f"{cat}/{img}", "question": q, "answer": truth, "category": cat},
                         "mme_perception_score": {"question_id": f"{cat}/{img}", "category": cat, "score": float(s)}})
        per.setdefault(cat, []).append(50 * sum(pair) + 100 * (sum(pair) == 2))
    total = sum(sum(v) / len(v) for v in per.values())
    return declare(TaskResult("mme", "0.0", [MetricValue("mme_perception_score", total, True, len(recs))],
                              samples=recs, identity={"data": "mme-test"}))


def image(path: Path, color) -> str:
    """A grey picture with a coloured disc and square (something to look at in the screenshots)."""
    from PIL import ImageDraw

    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        im = Image.new("RGB", (96, 72), (150, 150, 150))
        d = ImageDraw.Draw(im)
        d.ellipse([8, 8, 38, 38], fill=color)
        d.rectangle([56, 36, 84, 62], fill=tuple(255 - c for c in color))
        im.save(path)
    return str(path)


def chair_result(images: list[str], hallucinating: set[int], answers: dict[int, str] | None = None) -> TaskResult:
    """CHAIR-task records (mentions [[word, category]], merged-token positions): image i shows a dog;
    a hallucinating caption adds a cat."""
    recs = []
    for i, img in enumerate(images):
        hal = i in hallucinating
        answer = (answers or {}).get(i) or ("A dog next to a cat." if hal else "A dog on the grass.")
        mentions = [["dog", "dog"]] + ([["cat", "cat"]] if hal else [])
        positions = [1] + ([5] if hal else [])
        recs.append({"key": str(i), "image_id": i, "image": img, "prompt": "Describe the image.", "answer": answer,
                     "mentions": mentions, "positions": positions, "hallucinated": [["cat", "cat"]] if hal else [],
                     "hallucinated_positions": [5] if hal else [], "gt_objects": ["dog"], "recalled": ["dog"],
                     "n_tokens": 6 if hal else 5, "CHAIRs": float(hal), "CHAIRi": 0.5 if hal else 0.0})
    n = len(recs)
    cs = sum(r["CHAIRs"] for r in recs) / n
    ci = sum(len(r["hallucinated"]) for r in recs) / sum(len(r["mentions"]) for r in recs)
    ln = sum(r["n_tokens"] for r in recs) / n
    metrics = score(recs, CHAIR_METRICS, n_boot=0, variant="original")     # as the chair task stores them
    assert [m.value for m in metrics] == pytest.approx([cs, ci, 1.0, ln])
    return TaskResult("chair", "1", metrics, samples=recs, extra={"metric_specs": specs_extra(CHAIR_METRICS)})


def relevance_result(chair: TaskResult, base: float) -> TaskResult:
    recs = [{k: r[k] for k in ("key", "image_id", "image", "prompt", "answer")} for r in chair.samples]
    for i, r in enumerate(recs):
        r["relevance"] = r["relevance_whole"] = base + 0.01 * i - (0.05 if "cat" in r["answer"] else 0.0)
        r["sentence_scores"] = [r["relevance"]]
    n = len(recs)
    mean = sum(r["relevance"] for r in recs) / n
    specs = [m for m in RELEVANCE_METRICS if m.row is not None]           # as the relevance task, less the median
    metrics = score(recs, specs, n_boot=0)
    assert [m.value for m in metrics] == [pytest.approx(mean)] * 3
    return TaskResult("relevance", "1", metrics, samples=recs, extra={"metric_specs": specs_extra(specs)})


def pairs_result(images: list[str], t: int) -> TaskResult:
    pairs = [{"id": f"{t}-{j}", "key": f"{t}-{j}", "image": f"images/{Path(images[j]).name}", "prompt": "Describe.",
              "chosen": "A dog on the grass.", "rejected": "A dog and a cat on a sofa.",
              "chosen_reward": 0.9 - 0.05 * j, "rejected_reward": 0.3 + 0.02 * j,
              "chosen_relevance": 0.6 + 0.02 * j, "rejected_relevance": 0.4 + 0.03 * j} for j in range(5)]
    c = sum(p["chosen_reward"] for p in pairs) / 5
    r = sum(p["rejected_reward"] for p in pairs) / 5
    return TaskResult("csr_pairs", "1", [MetricValue("chosen_reward_mean", c, True, 5),
                                         MetricValue("rejected_reward_mean", r, True, 5),
                                         MetricValue("reward_gap", c - r, True, 5),
                                         MetricValue("num_pairs", 5.0, True), MetricValue("num_skipped", 2.0, False)],
                      samples=pairs, config={"iteration": t})


def train_result(t: int, steps: int = 12) -> TaskResult:
    from training.csr.train_log import train_result as make

    rows = [{"step": s, "epoch": s / steps, "loss": 0.693 - 0.02 * s * t, "rewards/margins": 0.01 * s * t,
             "rewards/accuracies": min(1.0, 0.5 + 0.04 * s), "rewards/chosen": 0.005 * s,
             "rewards/rejected": -0.005 * s * t, "logps/chosen": -50 + 0.2 * s, "logps/rejected": -60 - 0.5 * s * t}
            for s in range(1, steps + 1)]
    return make(rows, t, {"beta": 0.1})


# the demo-like store: base + 2 CSR iterations; answers improve, POPE hallucinates less
POPE_ANSWERS = (["yes"] * 12, ["yes" if i % 2 == 0 or i in (9, 11) else "no" for i in range(12)],
                ["yes" if i % 2 == 0 or i == 11 else "no" for i in range(12)])
MME_SCORES = ({("existence", "a"): (1, 0), ("existence", "b"): (1, 1), ("count", "c"): (0, 0)},
              {("existence", "a"): (1, 1), ("existence", "b"): (1, 1), ("count", "c"): (1, 0)},
              {("existence", "a"): (1, 1), ("existence", "b"): (1, 1), ("count", "c"): (1, 1)})


def demo_store(root: Path, n_images: int = 10, payload: str | None = None) -> Store:
    """Three checkpoints of one lineage (CHAIR falls, relevance rises, POPE and MME improve), CSR
    pairs on iterations 0 and 1 (their generators) and training logs on iterations 1 and 2."""
    store = Store(root / "store")
    imgs = [image(root / "world" / "images" / f"val_{i:03d}.png", (20 * i % 255, 140, 220 - 15 * i))
            for i in range(n_images)]
    hal_sets = (set(range(0, n_images, 2)), {0, 4}, set())
    for it in range(3):
        answers = {1: f"A dog. {payload}"} if payload and it == 2 else None
        chair = chair_result(imgs, hal_sets[it], answers)
        results = [chair, relevance_result(chair, 0.55 + 0.05 * it), pope_result(POPE_ANSWERS[it]),
                   mme_result(MME_SCORES[it])]
        meta = {"ckpt": f"/ckpts/iter{it}", "ckpt_hash": f"{it:064x}", "iteration": it,
                "parent": f"/ckpts/iter{it - 1}" if it else None, "method": "csr" if it else "sft",
                "label": "demo/base" if it == 0 else f"demo/iter_{it}", "data_root": str(root / "world"),
                "config": {"note": payload or "x"}}
        store.write_run(meta, results)
        if it < 2:    # pairs of iteration it+1 sit on their generator, this checkpoint
            store.write_run({**meta, "run_id": f"pairs-{it + 1}"}, [pairs_result(imgs, it + 1)])
        if it:
            store.write_run({**meta, "run_id": f"train-{it}"}, [train_result(it)])
    return store


# MMHal-Bench results scored by two judges (store.compare.with_judges)
WEIGHTS_A = "a1b2c3d4e5f60718"
JUDGE_A = {"kind": "local", "weights": WEIGHTS_A, "prompt_files": "p0", "server": "vllm-0.11",
           "serve_args": [], "temperature": 0.0, "max_tokens": 512}
JUDGE_B = {"kind": "server", "model": "judge-<b>", "served": {"id": "judge-<b>", "root": "/m/qwen"},
           "temperature": 0.0, "max_tokens": 512}
SOURCE_A = "/judges/qwen-judge-a/"


def mmhal_result(ratings: list[int], judge: dict, source: str, reply: str = "") -> TaskResult:
    """An mmhal result as the task stores it: ratings per question (two question types), the judge in the
    identity (with the prompt version) and its description in the config."""
    from evalsuite.tasks.mmhal import METRICS as MMHAL_METRICS

    samples = [{"key": str(i), "image_id": f"img{i}", "prompt": "What is shown?", "answer": "a dog",
                "question_type": ("attribute", "counting")[i % 2], "rating": r, "parsed": True,
                "judge_text": f"{reply}rating: {r}"} for i, r in enumerate(ratings)]
    metrics = score(samples, MMHAL_METRICS, n_boot=200, seed=0)
    identity = {"data": "d0", "images": "i0", "n": len(samples), "judge": {**judge, "prompt": "mmhal-llava-rlhf-1"}}
    return TaskResult("mmhal", "1", metrics, samples=samples, config={"judge": {**judge, "source": source}},
                      identity=identity, extra={"metric_specs": specs_extra(MMHAL_METRICS)})


def chair_plain(v: float) -> TaskResult:
    return TaskResult("chair", "1", [MetricValue("CHAIRs", v, False, 8, v - 0.05, v + 0.05)], identity={"n": 8})


def judged_store(tmp_path, judge_b: dict = JUDGE_B, reply_b: str = "") -> Store:
    """Lineage c0 -> c1 -> c2. mmhal: c0 and c1 judged by local judge A (mean 2.0 -> 3.0 over 8 questions,
    every rating +1), c1 also by server judge B (its replies start with `reply_b`), c2 by judge B only;
    chair (no judge) in every one."""
    store = Store(tmp_path / "s")
    base = [2, 1, 3, 2, 2, 1, 3, 2]
    runs = {0: [("A", base)], 1: [("A", [r + 1 for r in base]), ("B", [r + 2 for r in base])],
            2: [("B", [r + 3 for r in base])]}
    for it, judged in runs.items():
        for which, ratings in judged:
            judge, source = (JUDGE_A, SOURCE_A) if which == "A" else (judge_b, "http://127.0.0.1:8000/v1")
            store.write_run({"ckpt": f"/c/{it}", "ckpt_hash": f"h{it}", "iteration": it,
                             "parent": f"/c/{it - 1}" if it else None},
                            [mmhal_result(ratings, judge, source, reply_b if which == "B" else "")] + ([chair_plain(0.5 - 0.1 * it)] if which == "A"
                                                                      or it == 2 else []))
    return store
