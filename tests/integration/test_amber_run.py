"""`evalsuite run --tasks amber_g,amber_d` end to end: the synthetic world in AMBER's layout
(evalsuite/world/amber.py), the tiny kit checkpoint under --engine hf, the committed test spaCy pipeline."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.test_amber import nltk_ready  # noqa: F401  (fixture)

PIPELINE = Path(__file__).resolve().parents[1] / "data" / "amber" / "pipeline"


@pytest.fixture(scope="module")
def amber_world(world_dir, tmp_path_factory) -> Path:
    from evalsuite.world.amber import build_amber

    return build_amber(world_dir, tmp_path_factory.mktemp("amber") / "AMBER", split="val", images=3)


def test_world_in_amber_layout(amber_world):
    """3 images -> generative ids 1-3, then 6 questions per image (existence, state, number; yes and no)."""
    from evalsuite.metrics import amber

    data = amber.load_data(amber_world, tuple(amber.FILES))
    amber.check_queries(data, "query_generative", True)
    amber.check_queries(data, "query_discriminative", False)
    assert [q["id"] for q in data.queries["query_generative"]] == [1, 2, 3]
    assert len(data.queries["query_discriminative"]) == 18
    types = {a["type"] for a in data.annotations[3:]}
    assert types == {"discriminative-hallucination", "discriminative-attribute-state",
                     "discriminative-attribute-number"}
    assert [a["truth"] for a in data.annotations[3:9]] == ["yes", "no"] * 3
    first = data.annotations[0]
    assert first["truth"] and len(first["hallu"]) == 5 and not set(first["truth"]) & set(first["hallu"])
    assert (amber_world / "image" / "AMBER_3.jpg").read_bytes()[:2] == b"\xff\xd8"   # a JPEG


@pytest.mark.slow
def test_evalsuite_run_amber(tiny_vlm_dir, amber_world, tmp_path, nltk_ready):  # noqa: F811
    # in this process (conftest.cli_inprocess): spaCy, WordNet and the model's imports are this worker's,
    # not a fresh interpreter's; the real `evalsuite run` process is tests/integration/test_eval_to_report.py's
    from tests.conftest import cli_inprocess

    store = tmp_path / "store"
    res = cli_inprocess("run", "--ckpt", str(tiny_vlm_dir), "--tasks", "amber_g,amber_d", "--engine", "hf",
                        "--device", "cpu", "--store", str(store), "--output", str(tmp_path / "out"),
                        "--max-new-tokens", "8", f"amber.data_root={amber_world}",
                        f"amber.image_root={amber_world / 'image'}", f"amber.spacy_model={PIPELINE}",
                        "amber.n_boot=20")
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    g, d = summary["amber_g"], summary["amber_d"]
    assert [m["metric"] for m in g["metrics"]] == ["CHAIR", "Cover", "Hal", "Cog"]
    names = [m["metric"] for m in d["metrics"]]
    assert names[:4] == ["Accuracy", "Precision", "Recall", "F1"] and names[-1] == "AMBER"
    # the world has existence, state and number questions only: no action or relation rows
    assert "F1_existence" in names and "F1_number" in names and not any(n.endswith(("_action", "_relation"))
                                                                         for n in names)
    table = d["extra"]["released_table"]
    amber_score = next(m["value"] for m in d["metrics"] if m["metric"] == "AMBER")
    assert amber_score == pytest.approx((100 - table["generative"]["CHAIR"] + table["discriminative"]["F1"]) / 2)
    assert {m["metric"]: m["value"] for m in g["metrics"]} == g["extra"]["released_table"]["generative"]
    assert g["identity"]["spacy"]["pipeline"] == "en_core_web_lg"
    # per-sample rows in the task folders for the CIs (3 generative, 18 discriminative)
    assert all(m["n"] == 3 for m in g["metrics"]) and d["metrics"][0]["n"] == 18


@pytest.mark.parametrize("case", ["missing_file", "absent_id", "no_vectors", "not_utf8", "missing_image",
                                  "not_installed"])
def test_bad_amber_input_before_the_model(tiny_vlm_dir, amber_world, tmp_path, case, capsys, monkeypatch,
                                          nltk_ready):  # noqa: F811
    """One line, exit 2, before any model loads (loading it would fail the test)."""
    import shutil

    from evalsuite.cli import main as cli_main

    root = tmp_path / "AMBER"
    shutil.copytree(amber_world, root)
    model = PIPELINE
    if case == "missing_file":
        (root / "data" / "relation.json").unlink()
        want = "relation.json: missing"
    elif case == "absent_id":
        q = root / "data" / "query" / "query_generative.json"
        q.write_text(json.dumps(json.loads(q.read_text()) + [{"id": 999, "image": "AMBER_1.jpg", "query": "x"}]))
        want = "query id 999 is not in"
    elif case == "no_vectors":
        import spacy

        spacy.blank("en").to_disk(tmp_path / "blank")
        model = tmp_path / "blank"
        want = "AMBER's synonym check needs vectors"
    elif case == "not_utf8":
        (root / "data" / "annotations.json").write_bytes(b"\xff\xfe not utf-8")
        want = "annotations.json: not UTF-8"
    elif case == "not_installed":
        import spacy

        if spacy.util.is_package("en_core_web_lg"):
            pytest.skip("en_core_web_lg is installed here")
        model = "en_core_web_lg"   # the released default, named and never downloaded
        want = "on a connected machine: `python -m spacy download en_core_web_lg`"
    else:
        (root / "image" / "AMBER_2.jpg").unlink()
        want = "AMBER_2.jpg: missing (image of query id 2"
    from evalsuite.models import vlm

    def no_model(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(vlm, "load_vlm", no_model)
    rc = cli_main(["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "amber_g", "--store", str(tmp_path / "store"),
                   "--device", "cpu", f"amber.data_root={root}", f"amber.image_root={root / 'image'}",
                   f"amber.spacy_model={model}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("evalsuite: error: ") and want in err[0], err
