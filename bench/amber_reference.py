"""Regenerate tests/data/amber/: a small AMBER data set, a spaCy pipeline with a constructed vectors
table, responses that hit every scoring rule, and the released AMBER `inference.py`'s printed output
on them (the reference tests/unit/test_amber_reference.py compares evalsuite's numbers with).

Run it with the Python of a scratch environment that has spaCy and NLTK (never evalsuite's):

    python -m venv /tmp/amber_ref_env
    /tmp/amber_ref_env/bin/pip install spacy==3.8.16 nltk==3.10.4 tqdm
    NLTK_DATA=/path/to/nltk_data /tmp/amber_ref_env/bin/python bench/amber_reference.py \
        --released /path/to/AMBER --out tests/data/amber

`--released` is a checkout of junyangwang0410/AMBER (inference.py, data/, LICENSE); NLTK_DATA must hold
punkt_tab, averaged_perceptron_tagger_eng and wordnet. The pipeline (`pipeline/`) is packaged with
`spacy package` as `en_core_web_lg` and pip-installed into this same environment, so the released
script, run unmodified from a copy of the checkout, loads it by the name it hard-codes. Its stdout for
evaluation types g, d and a lands in reference_{g,d,a}.txt, and for type g on each generative response
alone in reference_g_<id>.txt (per-response numbers, not only their sums).
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# released generative entries kept (renumbered 1..6), with one response each
GENERATIVE = {
    1: "A man walks his dogs along the road beside a lake and a river, with tall trees and green hills under a "
       "clear sky. There are clouds, a goose, sand, a cat and a flower near the light.",
    2: "Two boats sail on the lake under a bridge, and an oar rests on the floor. A plane flies over the buildings; "
       "a pigeon and a kite. Leaves fall.",
    3: "A girl sits on the grass with flowers, a sunflower and a chair. Oranges and a camera lie on a line of tables.",
    6: "A person rides a bike on the ground near a fence; cows and sheep graze. A motorcycle, an eagle and a "
       "truck pass by a sign.",
    10: "Dogs bark. A man in a hat and necktie throws a football while a woman and a duck watch the ball.",
    21: "",
}
# released discriminative entries kept per type (renumbered after the generative ones), first ones of each type
PER_TYPE = 6
TYPES = ("discriminative-hallucination", "discriminative-attribute-state", "discriminative-attribute-number",
         "discriminative-attribute-action", "discriminative-relation", "relation")
# answers cycled over the discriminative queries of each truth: exact, lower-case, punctuated, sentence and
# empty answers, right and wrong
ANSWERS = {"yes": ("Yes", "yes", "Yes, there is a dog.", "No", "Yes", ""),
           "no": ("No", "no,", "No.", "Yes", " No", "No, there is no dog.", "No")}
# constructed word vectors: (word, hub word, cosine with the hub); a hub is a unit axis of its own
PAIRS = (("eagle", "bird", 0.805), ("goose", "bird", 0.795), ("pigeon", "bird", 0.8001), ("duck", "bird", 0.7999),
         ("cat", "dog", 0.85), ("river", "lake", 0.81), ("sand", "grass", 0.79), ("flower", "grass", 0.81),
         ("sunflower", "flower", 0.83), ("truck", "car", 0.82), ("football", "ball", 0.799))


def vectors() -> dict[str, list[float]]:
    """Each word on its own axis, tilted towards its hub by the cosine asked for."""
    words = list(dict.fromkeys([w for p in PAIRS for w in p[:2]]))
    dim = len(words)
    out: dict[str, list[float]] = {}

    def axis(w):
        v = [0.0] * dim
        v[words.index(w)] = 1.0
        return v

    for w in words:
        out.setdefault(w, axis(w))
    for word, hub, cos in PAIRS:
        h, own = out[hub], axis(word)
        out[word] = [cos * a + math.sqrt(1 - cos * cos) * b for a, b in zip(h, own)]
    return out


def build_pipeline(dest: Path) -> None:
    import numpy
    import spacy

    nlp = spacy.blank("en")
    for word, vec in vectors().items():
        nlp.vocab.set_vector(word, numpy.asarray(vec, dtype="float32"))
    nlp.meta.update({"name": "core_web_lg", "version": "0.0.1",
                     "description": "test pipeline: a constructed vectors table (evalsuite bench/amber_reference.py)",
                     "license": "Apache-2.0"})
    nlp.to_disk(dest)


def write_data(released: Path, out: Path) -> tuple[list[dict], list[dict]]:
    anns = json.loads((released / "data/annotations.json").read_text(encoding="utf-8"))
    queries = json.loads((released / "data/query/query_all.json").read_text(encoding="utf-8"))
    kept = [anns[i - 1] for i in GENERATIVE]
    for t in TYPES:
        kept += [a for a in anns if a["type"] == t][:PER_TYPE]
    new_anns, gen_q, disc_q, inference = [], [], [], []
    for new_id, a in enumerate(kept, 1):
        q = queries[a["id"] - 1]
        new_anns.append({**a, "id": new_id})
        row = {"id": new_id, "image": q["image"], "query": q["query"]}
        if a["type"] == "generative":
            gen_q.append(row)
            inference.append({"id": new_id, "response": GENERATIVE[a["id"]]})
        else:
            disc_q.append(row)
            seen = sum(1 for r in new_anns if r["type"] != "generative" and r["truth"] == a["truth"]) - 1
            inference.append({"id": new_id, "response": ANSWERS[a["truth"]][seen % len(ANSWERS[a["truth"]])]})
    d = out / "data"
    (d / "query").mkdir(parents=True, exist_ok=True)
    for name in ("relation.json", "safe_words.txt", "metrics.txt"):
        shutil.copyfile(released / "data" / name, d / name)
    shutil.copyfile(released / "LICENSE", out / "LICENSE")
    for path, obj in ((d / "annotations.json", new_anns), (d / "query/query_generative.json", gen_q),
                      (d / "query/query_discriminative.json", disc_q)):
        path.write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8")
    gen = [r for r in inference if r["id"] <= len(GENERATIVE)]
    disc = [r for r in inference if r["id"] > len(GENERATIVE)]
    for name, rows in (("inference_g.json", gen), ("inference_d.json", disc), ("inference_a.json", inference)):
        (out / name).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return gen, disc


def run_released(released: Path, out: Path) -> None:
    """The released script, unmodified, from a copy of the checkout, on our files."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copyfile(released / "inference.py", Path(tmp) / "inference.py")
        for kind in ("g", "d", "a"):
            got = subprocess.run(
                [sys.executable, "inference.py", "--evaluation_type", kind,
                 "--inference_data", str((out / f"inference_{kind}.json").resolve()),
                 "--annotation", str((out / "data/annotations.json").resolve()),
                 "--word_association", str((out / "data/relation.json").resolve()),
                 "--safe_words", str((out / "data/safe_words.txt").resolve()),
                 "--metrics", str((out / "data/metrics.txt").resolve())],
                cwd=tmp, capture_output=True, text=True, check=True)
            (out / f"reference_{kind}.txt").write_text(got.stdout, encoding="utf-8")
        for row in json.loads((out / "inference_g.json").read_text(encoding="utf-8")):
            one = Path(tmp) / "one.json"
            one.write_text(json.dumps([row]), encoding="utf-8")
            got = subprocess.run(
                [sys.executable, "inference.py", "--evaluation_type", "g", "--inference_data", str(one),
                 "--annotation", str((out / "data/annotations.json").resolve()),
                 "--word_association", str((out / "data/relation.json").resolve()),
                 "--safe_words", str((out / "data/safe_words.txt").resolve()),
                 "--metrics", str((out / "data/metrics.txt").resolve())],
                cwd=tmp, capture_output=True, text=True, check=True)
            (out / f"reference_g_{row['id']}.txt").write_text(got.stdout, encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--released", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    write_data(args.released, args.out)
    pipe = args.out / "pipeline"
    shutil.rmtree(pipe, ignore_errors=True)
    build_pipeline(pipe)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "spacy", "package", str(pipe), tmp, "--force"], check=True)
        (sdist,) = Path(tmp).glob("en_core_web_lg-*/dist/*.tar.gz")
        subprocess.run([sys.executable, "-m", "pip", "install", "--force-reinstall", "--no-deps", str(sdist)],
                       check=True)
    run_released(args.released, args.out)


if __name__ == "__main__":
    main()
