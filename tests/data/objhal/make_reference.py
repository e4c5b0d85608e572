"""Build the Object HalBench reference inputs and run RLAIF-V's released scripts on them, unmodified
(README.md here says how and why). Run with a scratch environment's Python that has spaCy, NLTK, jsonlines,
tqdm and numpy, never evalsuite's: it pip-installs a package named en_core_web_trf.

    python make_reference.py --released RLAIF-V [--build-only]
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
N = 300   # the released script asserts 300 distinct image ids

# (lower-cased word, Penn tag, lemma) of the constructed pipeline; every other token gets no tag and no lemma
WORDS = """a DT a|an DT an|the DT the|and CC and|on IN on|of IN of|near IN near|with IN with|1 CD 1|two CD two
dog NN dog|dogs NNS dog|puppy NN puppy|cat NN cat|cats NNS cat|kitten NN kitten|man NN man|men NNS man
woman NN woman|women NNS woman|people NNS people|person NN person|child NN child|children NNS child
bicycle NN bicycle|bike NN bike|car NN car|cars NNS car|taxi NN taxi|chair NN chair|chairs NNS chair
table NN table|tables NNS table|dining NN dining|cloth NN cloth|toilet NN toilet|seat NN seat
cell NN cell|phone NN phone|phones NNS phone|iphone NNP iPhone|teddy NN teddy|bear NN bear|bears NNS bear
tie NN tie|bow NN bow|bird NN bird|birds NNS bird|ski NN ski|skis NNS ski|wine NN wine|glass NN glass
glasses NNS glass|bed NN bed|frisbee NNP frisbee|ball NN ball|tree NN tree|trees NNS tree|grass NN grass
sky NN sky|window NN window|wall NN wall|shirt NN shirt|hat NN hat|baby NN baby|elephant NN elephant
elephants NNS elephant|hot JJ hot|black JJ black|white JJ white|red JJ red|small JJ small|large JJ large
wooden JJ wooden|sitting VBG sit|park NN park|room NN room|kitchen NN kitchen|sofa NN sofa|couch NN couch
laptop NN laptop|computer NN computer|notebook NN notebook|umbrella NN umbrella|kite NN kite|sheep NN sheep
horse NN horse|horses NNS horse|cow NN cow|cows NNS cow|plate NN plate|home NN home|train NN train|track NN track"""

# (category id, COCO name) of the constructed annotations
CATEGORIES = [(1, "person"), (2, "bicycle"), (3, "car"), (16, "bird"), (17, "cat"), (18, "dog"), (19, "horse"),
              (20, "sheep"), (21, "cow"), (22, "elephant"), (23, "bear"), (28, "umbrella"), (32, "tie"),
              (35, "skis"), (37, "sports ball"), (38, "kite"), (46, "wine glass"), (62, "chair"), (63, "couch"),
              (65, "bed"), (67, "dining table"), (70, "toilet"), (73, "laptop"), (77, "cell phone"),
              (88, "teddy bear"), (34, "frisbee"), (7, "train")]

# object phrases an answer mentions and how a judge might name them
PHRASES = ["a black dog", "two dogs", "a puppy", "a cat", "cats", "a man", "two men", "a woman", "people",
           "a child", "children", "a bicycle", "a red car", "cars", "a taxi", "a wooden chair", "chairs",
           "a dining table", "a table cloth", "a toilet", "a toilet seat", "a cell phone", "an iPhone",
           "a teddy bear", "teddy bears", "a bow tie", "a tie", "a bird", "birds", "skis", "a wine glass",
           "wine glasses", "a bed", "a frisbee", "a ball", "a tree", "trees", "grass", "the sky", "a window",
           "a white shirt", "a hat", "a baby elephant", "elephants", "a hot dog", "a sofa", "a couch", "a laptop",
           "a notebook computer", "an umbrella", "a kite", "a sheep", "horses", "a cow", "a home plate",
           "a train track", "a large bear", "a small kitten", "a seat"]
CAPTION_WORDS = ["dog", "dogs", "cat", "man", "men", "woman", "people", "child", "bicycle", "car", "chair",
                 "dining table", "table", "toilet", "toilet seat", "cell phone", "teddy bear", "teddy bears", "tie",
                 "bow tie", "bird", "skis", "wine glass", "wine glasses", "bed", "frisbee", "ball", "laptop",
                 "couch", "sofa", "umbrella", "kite", "sheep", "horse", "cows", "elephant", "baby elephant",
                 "passenger train", "seat", "grass", "tree", "motor bike"]

# replies the released script cannot read (it asks again): the stand-in serves one of these first
MALFORMED = ['```json\n["dog"]\n```', "The objects are a dog and a cat.", "()", '["dog", "cat"',
             '["dog"] and more', 'Objects:\n["dog"]\nThat is all.', ""]


def png_bytes(seed: int) -> bytes:
    """A 4x4 RGB PNG whose colour depends on `seed` (the prompt file's inline image)."""
    rgb = bytes([(seed * 37) % 256, (seed * 91) % 256, (seed * 53) % 256])
    raw = b"".join(b"\x00" + rgb * 4 for _ in range(4))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def judge_names(phrase: str, rng: random.Random) -> list:
    """What a judge lists for one phrase: the phrase less its article, sometimes oddly written."""
    name = phrase.split(" ", 1)[1] if phrase.split(" ", 1)[0] in ("a", "an", "the", "two") else phrase
    r = rng.random()
    if r < 0.1:
        return [name.capitalize()]
    if r < 0.15:
        return [name, name]
    return [name]


def build(out: Path, seed: int = 0) -> dict:
    """Write the inputs under `out`; return {answer: [replies in the order the stand-in serves them]}."""
    rng = random.Random(seed)
    ids = sorted(rng.sample(range(100000, 600000), N))
    cat_ids = [c for c, _ in CATEGORIES]
    files, truth = {}, {}
    names = dict(CATEGORIES)
    for split, part in (("val", ids[:200]), ("train", ids[200:])):
        images = [{"id": i, "file_name": f"COCO_{split}2014_{i:012d}.jpg", "width": 4, "height": 4} for i in part]
        inst, caps = [], []
        for i in part:
            for _ in range(rng.randint(0, 3)):
                inst.append({"id": len(inst) + 1, "image_id": i, "category_id": rng.choice(cat_ids),
                             "iscrowd": 0, "area": 1.0, "bbox": [0, 0, 1, 1]})
                truth.setdefault(i, set()).add(names[inst[-1]["category_id"]].split()[-1])
            for _ in range(rng.randint(1, 2)):
                words = rng.sample(CAPTION_WORDS, rng.randint(0, 3))
                text = "A photo of " + (" and ".join(f"a {w}" for w in words) if words else "something") + "."
                caps.append({"id": len(caps) + 1, "image_id": i, "caption": text.upper() if rng.random() < 0.05 else text})
        base = {"info": {"description": "constructed"}, "licenses": []}
        files[f"instances_{split}2014.json"] = {**base, "images": images, "annotations": inst,
                                                "categories": [{"id": c, "name": n, "supercategory": "x"}
                                                               for c, n in CATEGORIES]}
        files[f"captions_{split}2014.json"] = {**base, "images": images, "annotations": caps}
    ann = out / "coco" / "annotations"
    ann.mkdir(parents=True, exist_ok=True)
    for name, doc in files.items():
        (ann / name).write_text(json.dumps(doc))

    questions = ["Provide a thorough description of the given image.", "What is this photo about? Please answer in great detail.",
                 "Describe this image in detail.", "Explain the narrative or story this image {answer} tells."]
    prompts, answers, replies = [], [], {}
    for k, i in enumerate(ids):
        prompts.append({"image_id": i if k % 3 else str(i), "question": questions[k % len(questions)],
                        "image": base64.b64encode(png_bytes(k)).decode()})
        kind = k % 20
        if kind == 0:
            text = rng.choice(["A dog.", "Two cats sleeping.", "Nothing here", "  A red   car "])
        else:
            true = [p for p in PHRASES if any(w in p for w in truth.get(i, ()))]
            phrases = rng.sample(PHRASES, rng.randint(0, 3))
            phrases = list(dict.fromkeys(rng.sample(true, min(len(true), rng.randint(0, 3))) + phrases)) or ["a tree"]
            text = f"In scene {k}, the image shows " + ", ".join(phrases[:-1]) + (" and " if len(phrases) > 1 else "") \
                + phrases[-1] + "."
            if kind == 1:
                text = "Assistant: " + text
            if kind == 2:
                text = text.replace(" shows ", " shows  ")
        answers.append({"question_id": k, "prompt": prompts[-1]["question"], "text": text, "model_id": "constructed"})
        caption = text.replace("Assistant:", "").strip()
        if len(caption.split()) <= 3:
            continue
        names: list = []
        for p in phrases:
            names += judge_names(p, rng)
        good = json.dumps(names)
        if kind == 3:
            good = "Here are the objects:\n" + good
        elif kind == 4:
            good = "[]"
        elif kind == 5:
            good = json.dumps(names + [1, ""])
        elif kind == 6:
            good = json.dumps([names, "dog"])
        elif kind == 7:
            good = json.dumps(names, indent=2)
        served = [good]
        if kind in (8, 9):
            served = [MALFORMED[(k // 20) % len(MALFORMED)]] + served
        if kind == 9 and k % 40 == 9:
            served = [MALFORMED[(k // 20 + 1) % len(MALFORMED)]] + served
        assert caption not in replies, caption
        replies[caption] = served
    (out / "prompts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in prompts))
    (out / "answers.jsonl").write_text("".join(json.dumps(a) + "\n" for a in answers))
    (out / "replies.json").write_text(json.dumps(replies, indent=1))
    return replies


def build_pipeline(out: Path) -> None:
    import spacy

    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("attribute_ruler")
    for entry in WORDS.replace("\n", "|").split("|"):
        word, tag, lemma = entry.split()
        ruler.add([[{"LOWER": word}]], {"TAG": tag, "LEMMA": lemma})
    nlp.meta.update(name="core_web_trf", version="0.0.1",
                    description="constructed for evalsuite's Object HalBench tests: tags and lemmas of a word list")
    if out.exists():
        shutil.rmtree(out)
    nlp.to_disk(out)


STAND_IN = '''"""Stand-in for RLAIF-V's gpt4_grpc: Chat serves recorded replies instead of the network."""
import json
import os
import threading

_REPLIES = json.load(open(os.environ["OBJHAL_REPLIES"]))
_LOG = os.environ["OBJHAL_SERVED"]
_LOCK = threading.Lock()
_SEEN = {}


class Chat:
    def __init__(self, model="", timeout_sec=20, openai_apikey=""):
        self.model = model

    def chat_completion(self, messages, temperature=0.2, top_p=1, max_tokens=512, presence_penalty=0,
                        frequency_penalty=0):
        text = messages[0]["content"]
        answer = text.split("[Start of Examiner's Answer]\\n\\n", 1)[1].split("\\n\\n[End of Examiner's Answer]", 1)[0]
        with _LOCK:
            n = _SEEN.get(answer, 0)
            _SEEN[answer] = n + 1
            served = _REPLIES[answer]
            content = served[min(n, len(served) - 1)]
            with open(_LOG, "a") as f:
                f.write(json.dumps({"answer": answer, "attempt": n, "role": messages[0]["role"],
                                    "n_messages": len(messages), "temperature": temperature,
                                    "max_tokens": max_tokens, "prompt": text, "content": content}) + "\\n")
        return {"model": "recorded-replies", "choices": [{"message": {"content": content}}],
                "usage": {"total_tokens": 3, "prompt_tokens": 2, "completion_tokens": 1}}
'''


def run_released(released: Path, out: Path, py: str) -> None:
    ref = out / "reference"
    if ref.exists():
        shutil.rmtree(ref)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "eval" / "data").mkdir(parents=True)
        for name in ("eval_gpt_obj_halbench.py", "summarize_gpt_obj_halbench_review.py"):
            shutil.copy(released / "eval" / name, tmp / "eval" / name)
        shutil.copy(released / "eval" / "data" / "synonyms_refine.txt", tmp / "eval" / "data")
        (tmp / "standin").mkdir()
        (tmp / "standin" / "gpt4_grpc.py").write_text(STAND_IN)
        for mode, flags in (("judge", ["--use_gpt"]), ("chair", [])):
            base = tmp / mode
            run_dir = base / "constructed" / "run" / "step-0"
            run_dir.mkdir(parents=True)
            shutil.copy(out / "answers.jsonl", run_dir / "obj_halbench_answer.jsonl")
            served = tmp / f"served_{mode}.jsonl"
            env = {**os.environ, "PYTHONPATH": str(tmp / "standin"), "OBJHAL_REPLIES": str(out / "replies.json"),
                   "OBJHAL_SERVED": str(served), "PYTHONHASHSEED": "0"}
            cmd = [py, "eval/eval_gpt_obj_halbench.py", "--coco_path", str(out / "coco" / "annotations"),
                   "--cap_folder", f"{run_dir}/", "--cap_type", "obj_halbench_answer.jsonl",
                   "--org_folder", str(out / "prompts.jsonl"), "--openai_key", "none", *flags]
            log = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, check=False)
            dest = ref / mode
            dest.mkdir(parents=True)
            (dest / "eval_stdout.txt").write_text(log.stdout)
            if log.returncode != 0:
                sys.exit(f"released eval ({mode}) failed:\n{log.stderr[-3000:]}")
            summary = subprocess.run([py, "eval/summarize_gpt_obj_halbench_review.py", f"{base}/"], cwd=tmp, env=env,
                                     capture_output=True, text=True, check=True)
            (dest / "obj_halbench_scores.txt").write_text(summary.stdout.replace(str(tmp), "TMP"))
            shutil.copy(run_dir / "hall_obj_halbench_answer_-1.json", dest / "hall_obj_halbench_answer_-1.json")
            if served.exists():
                shutil.copy(served, dest / "served.jsonl")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--released", type=Path, required=True, help="an RLAIF-V checkout (eval/...)")
    ap.add_argument("--build-only", action="store_true")
    args = ap.parse_args()
    shutil.copy(args.released / "eval" / "data" / "synonyms_refine.txt", HERE / "synonyms_refine.txt")
    build(HERE)
    build_pipeline(HERE / "pipeline")
    if args.build_only:
        return
    with tempfile.TemporaryDirectory() as pkg:
        subprocess.run([sys.executable, "-m", "spacy", "package", str(HERE / "pipeline"), pkg, "--force"],
                       check=True, capture_output=True)
        sdist = next(Path(pkg).rglob("*.tar.gz"))
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--force-reinstall",
                        "--no-deps", str(sdist)], check=True, capture_output=True)
    run_released(args.released, HERE, sys.executable)


if __name__ == "__main__":
    main()
