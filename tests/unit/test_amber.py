"""AMBER scoring (evalsuite/metrics/amber.py) on hand-worked examples, the answer rules, and bad input."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsuite.errors import UserError

DATA = Path(__file__).resolve().parents[1] / "data" / "amber"


@pytest.fixture(scope="module")
def nltk_ready(request, tmp_path_factory):
    """punkt_tab, the tagger and WordNet on NLTK's path: where NLTK finds them already, else built from the
    committed tagger + Debian's WordNet (skipped without WordNet, as the CHAIR golden tests)."""
    from evalsuite.metrics import nltk_resources, nltk_setup

    need = (nltk_resources.PUNKT, nltk_resources.TAGGER, nltk_resources.WORDNET)
    try:
        nltk_resources.require(need)
        return
    except UserError:
        pass
    if any(not (nltk_setup.DEBIAN_WORDNET / f).is_file() for f in nltk_setup.WORDNET_FILES):
        pytest.skip("no WordNet (apt-get install -y wordnet-base wordnet-sense-index)")
    out = nltk_setup.build_nltk_data(tmp_path_factory.mktemp("nltk_data"),
                                     tagger_from=request.getfixturevalue("official_nltk_data"))
    nltk_resources.add_data_dir(out)


def write_data(root: Path, annotations: list, relation: dict | None = None, safe: str = "light\n",
               generative=None, discriminative=None) -> Path:
    d = root / "data"
    (d / "query").mkdir(parents=True, exist_ok=True)
    (d / "annotations.json").write_text(json.dumps(annotations))
    (d / "relation.json").write_text(json.dumps(relation or {}))
    (d / "safe_words.txt").write_text(safe)
    (d / "metrics.txt").write_text((DATA / "data" / "metrics.txt").read_text())
    gen = [{"id": a["id"], "image": f"AMBER_{a['id']}.jpg", "query": "Describe this image."}
           for a in annotations if a["type"] == "generative"]
    disc = [{"id": a["id"], "image": "AMBER_1.jpg", "query": "Is there a dog?"}
            for a in annotations if a["type"] != "generative"]
    (d / "query" / "query_generative.json").write_text(json.dumps(generative if generative is not None else gen))
    (d / "query" / "query_discriminative.json").write_text(json.dumps(discriminative if discriminative is not None
                                                                      else disc))
    return root


RELATION = {"grass": ["ground"], "ground": ["floor"], "lake": ["water"], "river": ["lake", "water"],
            "dog": [], "cat": [], "bird": ["bill"], "light": []}
# the fake vectors: river ~ lake 0.81, cat ~ dog 0.85, everything else unlike (a word is like itself)
SIMILAR = {("river", "lake"): 0.81, ("cat", "dog"): 0.85}


def fake_similarity(a: str, b: str) -> float:
    return 1.0 if a == b else SIMILAR.get((a, b), SIMILAR.get((b, a), 0.0))


@pytest.fixture
def gen_data(tmp_path):
    from evalsuite.metrics import amber

    anns = [{"id": 1, "type": "generative", "truth": ["grass", "ground", "lake"], "hallu": ["dog", "bird"]},
            {"id": 2, "type": "generative", "truth": ["grass", "ground", "lake"], "hallu": ["dog", "bird"]}]
    root = write_data(tmp_path / "amber", anns, RELATION)
    return amber.load_data(root, ("annotations", "relation", "safe_words", "metrics", "query_generative"))


def test_generative_rules_by_hand(gen_data, nltk_ready):
    """"The ground near the river has dogs, a cat and a light.": nouns ground, river, dog (plural), cat, light.
    ground: an associated word of grass comes before the object ground in the expanded truth list, so it covers
    grass (not ground); river: no truth or hallu word, like lake (0.81) -> covers lake, not hallucinated; dog: a
    hallu object -> hit, no truth word like it -> hallucinated; cat: like dog (0.85) -> dog hit again,
    hallucinated; light: a safe word, counted as a mention only."""
    from evalsuite.metrics import amber

    scorer = amber.GenerativeScorer(gen_data, fake_similarity, 0.8)
    r = scorer.score("The ground near the river has dogs, a cat and a light.", gen_data.entry(1, "t"))
    assert r["mentions"] == [["ground", "grass"], ["river", "lake"], ["dog", "dog"], ["cat", "cat"], ["light", "light"]]
    assert r["hallucinated"] == [["dog", "dog"], ["cat", "cat"]]
    assert (r["covered"], r["cognitive"]) == (["grass", "lake"], ["dog"])
    # a threshold above 0.81: river is hallucinated now, and lake no longer covered
    strict = amber.GenerativeScorer(gen_data, fake_similarity, 0.82).score(
        "The ground near the river has dogs, a cat and a light.", gen_data.entry(1, "t"))
    assert [h[0] for h in strict["hallucinated"]] == ["river", "dog", "cat"] and strict["covered"] == ["grass"]
    # capitalised nouns are not lower-cased (the released extraction): "Dogs" is no AMBER word
    assert scorer.score("Dogs run.", gen_data.entry(1, "t"))["mentions"] == []


def test_generative_metrics_by_hand(gen_data, nltk_ready):
    """Responses 1 (above) and 2 (empty). Exact: CHAIR 2/5, Cover 2/6, Hal 1/2, Cog 1/4. Printed (released:
    counts start at 0.001, rounded to 0.1): 2/5.001 = 39.99 -> 40.0, 2/6.001 = 33.33 -> 33.3,
    100 - 1/2.001 = 50.02 -> 50.0, 1/4.001 = 24.99 -> 25.0; response 2 alone: Hal 100 - 1/1.001 = 0.1."""
    from evalsuite.metrics import amber
    from evalsuite.tasks.amber import GEN_METRICS
    from evalsuite.tasks.metric_spec import score

    scorer = amber.GenerativeScorer(gen_data, fake_similarity, 0.8)
    recs = [{"key": "1", **scorer.score("The ground near the river has dogs, a cat and a light.", gen_data.entry(1, "t"))},
            {"key": "2", **scorer.score("", gen_data.entry(2, "t"))}]
    table = amber.released_table(recs, None, gen_data.start)
    assert table == {"generative": {"CHAIR": 40.0, "Cover": 33.3, "Hal": 50.0, "Cog": 25.0}}
    assert amber.released_table(recs[1:], None, gen_data.start)["generative"]["Hal"] == 0.1
    values = {m.metric: m.value for m in score(recs, GEN_METRICS, n_boot=0)}
    assert values == pytest.approx({"CHAIR": 40.0, "Cover": 100 / 3, "Hal": 50.0, "Cog": 25.0})


DISC = [("discriminative-hallucination", "yes", "Yes"), ("discriminative-hallucination", "no", "No"),
        ("discriminative-attribute-state", "no", "No."), ("discriminative-attribute-state", "yes", "Yes, there is a dog."),
        ("discriminative-relation", "no", "Yes"), ("discriminative-attribute-number", "no", "No")]


def _disc_records(rule: str) -> list[dict]:
    from evalsuite.metrics import amber

    return [{"key": str(i), **amber.score_discriminative(resp, {"id": i, "type": t, "truth": truth}, rule)}
            for i, (t, truth, resp) in enumerate(DISC, 1)]


def test_discriminative_by_hand():
    """Released rule: "No." and "Yes, there is a dog." are neither answer. Correct 1, 2, 6 -> 3/6; answered No
    2 and 6, both truth no -> precision 2/2; truth no 2, 3, 5, 6 -> recall 2/4; F1 2*1*.5/1.5 = 66.7.
    Printed with the 0.001 starts: 3/6.001 -> 50.0, 2/2.001 = 99.95 -> 100.0, 2/4.001 -> 50.0, F1 from the
    rounded 100.0 and 50.0 -> 66.7; existence alone: 1/1.001 = 99.9 precision and recall, F1 1.996002/1.999 = 99.850025 -> 99.9
    (0.001 in its denominator). First-word rule: 3 and 4 read as no / yes, so 5/6, 3/3, 3/4, F1 6/7."""
    from evalsuite.metrics import amber
    from evalsuite.tasks.amber import DISC_METRICS
    from evalsuite.tasks.metric_spec import score

    start = amber.load_data(DATA, ("metrics",)).start
    table = amber.released_table(None, _disc_records("released"), start)
    assert table["discriminative"] == {"Accuracy": 50.0, "Precision": 100.0, "Recall": 50.0, "F1": 66.7}
    assert table["existence"] == {"Accuracy": 100.0, "Precision": 99.9, "Recall": 99.9, "F1": 99.9}
    values = {m.metric: m.value for m in score(_disc_records("released"), DISC_METRICS, n_boot=0)}
    assert {k: values[k] for k in ("Accuracy", "Precision", "Recall", "F1")} == pytest.approx(
        {"Accuracy": 50.0, "Precision": 100.0, "Recall": 50.0, "F1": 200 / 3})
    # attribute = state + number: 1 of 3 correct; no action rows at all -> no action metric
    assert values["Accuracy_attribute"] == pytest.approx(100 / 3) and "Accuracy_action" not in values
    assert values["Recall_relation"] == 0.0 and values["Precision_relation"] == 0.0
    first = amber.released_table(None, _disc_records("first_word"), start)["discriminative"]
    assert first == {"Accuracy": 83.3, "Precision": 100.0, "Recall": 75.0, "F1": 85.7}


@pytest.mark.parametrize("text,released,first", [
    ("Yes", "yes", "yes"), ("No", "no", "no"), ("no,", None, "no"), ("No.", None, "no"), ("", None, None),
    ("Yes, there is a dog.", None, "yes"), (" No", None, "no"), ("yes", None, "yes"), ("Nope", None, None),
    ("**No**, none", None, "no"), ("There is no dog.", None, None)])
def test_answer_rules(text, released, first):
    from evalsuite.metrics.amber import read_answer

    assert (read_answer(text, "released"), read_answer(text, "first_word")) == (released, first)


def test_amber_score():
    from evalsuite.metrics.amber import amber_score

    assert amber_score(10.0, 80.0) == 85.0


# ---------------------------------------------------------------------------------------- bad input

def _load(root, need=("annotations", "relation", "safe_words", "metrics", "query_generative")):
    from evalsuite.metrics import amber

    data = amber.load_data(root, need)
    amber.check_queries(data, "query_generative", True)
    return data


def test_missing_file(tmp_path):
    root = write_data(tmp_path, [{"id": 1, "type": "generative", "truth": ["dog"], "hallu": []}], {"dog": []})
    (root / "data" / "safe_words.txt").unlink()
    with pytest.raises(UserError, match=r"safe_words.txt: missing"):
        _load(root)


def test_query_id_absent(tmp_path):
    root = write_data(tmp_path, [{"id": 1, "type": "generative", "truth": ["dog"], "hallu": []}], {"dog": []},
                      generative=[{"id": 7, "image": "AMBER_7.jpg", "query": "Describe this image."}])
    with pytest.raises(UserError, match=r"query_generative.json: query id 7 is not in .*annotations.json"):
        _load(root)


@pytest.mark.parametrize("content,message", [(b"\xff\xfe[", "not UTF-8"), (b"[{\"id\": 1,", "not JSON"),
                                             (b"{\"id\": 1}", "expected a JSON list"),
                                             (b"[{\"id\": 2, \"type\": \"generative\"}]", "id 2, expected 1")])
def test_bad_annotations(tmp_path, content, message):
    root = write_data(tmp_path, [], {})
    (root / "data" / "annotations.json").write_bytes(content)
    with pytest.raises(UserError, match=message):
        _load(root)


def test_object_not_in_relation(tmp_path):
    root = write_data(tmp_path, [{"id": 1, "type": "generative", "truth": ["yak"], "hallu": []}], {"dog": []})
    with pytest.raises(UserError, match=r"object 'yak' is not a key of"):
        _load(root)


def test_pipeline_without_vectors(tmp_path):
    import spacy

    from evalsuite.metrics.amber import load_pipeline

    spacy.blank("en").to_disk(tmp_path / "blank")
    with pytest.raises(UserError, match="AMBER's synonym check needs vectors"):
        load_pipeline(str(tmp_path / "blank"))


def test_pipeline_not_installed():
    from evalsuite.metrics.amber import load_pipeline

    with pytest.raises(UserError, match=r"neither an installed spaCy pipeline nor a directory; on a connected "
                                        r"machine: `python -m spacy download en_core_web_xx`"):
        load_pipeline("en_core_web_xx")


@pytest.mark.parametrize("tasks,option,reader", [("amber_d", "amber.similarity=0.7", "amber_g"),
                                                 ("amber_g", "amber.answer_rule=first_word", "amber_d")])
def test_option_of_the_other_task_is_refused(tmp_path, capsys, tasks, option, reader):
    """An amber option only the task not in the run reads: one line naming it, not accepted and ignored."""
    from evalsuite.cli import main as cli_main

    rc = cli_main(["run", "--ckpt", str(tmp_path), "--tasks", tasks, "--dry-run", option])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"has no effect with tasks {tasks}; pass --tasks {reader}" in err[0]
