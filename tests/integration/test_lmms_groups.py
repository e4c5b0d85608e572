"""Any lmms-eval task on local data (the eval config's `lmms.data.<task>`), and lmms-eval groups.

Data: ScienceQA and AI2D files shaped like their hub datasets (the columns the tasks' utils.py read,
images as a `datasets.Image` feature), written as a single parquet and as a hub-snapshot folder. The
model is a stub that always answers "A." (tests/integration/test_lmms.py's AnswerBackend).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from evalsuite.errors import UserError
# _scratch_caches is test_lmms.py's autouse fixture: imported, it applies to this module's tests too
from tests.integration.test_lmms import AnswerBackend, _run, _scratch_caches, _to_parquet, _values  # noqa: F401


@pytest.fixture(scope="module")
def adapter():
    """As tests/integration/test_lmms.py's: defined here, since an imported fixture reads as an unused import
    that each test's parameter then redefines."""
    from evalsuite.lmms import backend as lmms_backend

    lmms_backend.import_evaluator()
    return lmms_backend


# ScienceQA `answer` is the index of the right choice: targets A, B, C, A, B, D, A, C
SQA_ANSWERS = [0, 1, 2, 0, 1, 3, 0, 2]
# AI2D `answer` is the index as a string: targets A, B, C, D, A, B, C, D
AI2D_ANSWERS = ["0", "1", "2", "3", "0", "1", "2", "3"]


def _images():
    from PIL import Image

    return [Image.new("RGB", (32, 32), (30 * i, 100, 250 - 30 * i)) for i in range(8)]


@pytest.fixture(scope="module")
def local_data(tmp_path_factory) -> dict[str, Path]:
    """sqa_img.parquet (8 docs), sqa_full.parquet (the same 8, another file), ai2d_snapshot/data/test-*.parquet."""
    import datasets

    root = tmp_path_factory.mktemp("lmms-local")
    imgs = _images()
    sqa = [{"image": imgs[i], "question": f"Which colour is patch {i}?", "choices": ["red", "green", "blue", "gray"],
            "answer": a, "hint": "" if i % 2 else "Look at the patch.", "task": "closed choice", "grade": "grade2",
            "subject": "natural science", "topic": "colour", "category": "c", "skill": "s", "lecture": "",
            "solution": ""} for i, a in enumerate(SQA_ANSWERS)]
    _to_parquet(datasets, sqa, root / "sqa_img.parquet")
    _to_parquet(datasets, sqa, root / "sqa_full.parquet")
    ai2d = [{"image": imgs[i], "question": f"What is part {i}?", "options": ["leaf", "root", "stem", "seed"],
             "answer": a} for i, a in enumerate(AI2D_ANSWERS)]
    (root / "ai2d_snapshot" / "data").mkdir(parents=True)
    _to_parquet(datasets, ai2d, root / "ai2d_snapshot" / "data" / "test-00000-of-00001.parquet")
    return {"sqa_img": root / "sqa_img.parquet", "sqa_full": root / "sqa_full.parquet",
            "ai2d": root / "ai2d_snapshot"}


def test_scienceqa_img_and_ai2d_on_local_files(adapter, local_data, tmp_path):
    """Always "A.". ScienceQA scores "A." as the letter A: --limit 4 -> targets A, B, C, A -> 2/4 = 0.5;
    all 8 -> A at docs 0, 3, 6 -> 3/8 = 0.375. AI2D (flexible-extract filter takes "A"): targets
    A, B, C, D -> 1/4 = 0.25; all 8 -> 2/8 = 0.25. Each result says where its number came from."""
    data = {"scienceqa_img": str(local_data["sqa_img"]), "ai2d": str(local_data["ai2d"])}
    sqa, ai2d = _run(tmp_path, None, ["scienceqa_img", "ai2d"], data=data, limit=4, backend=AnswerBackend("A."))
    assert (sqa.task, ai2d.task) == ("scienceqa_img", "ai2d")
    assert _values(sqa) == {"exact_match": 0.5} and [m.n for m in sqa.metrics] == [4]
    assert [(m.metric, m.variant, m.value) for m in ai2d.metrics] == [("exact_match", "flexible-extract", 0.25)]
    assert sqa.config["data_source"] == str(local_data["sqa_img"].resolve())
    assert ai2d.config["data_source"] == str(local_data["ai2d"].resolve())
    assert (sqa.config["limit"], sqa.config["n"], sqa.config["n_total"]) == (4, 4, 8)
    assert sqa.identity["limit"] == 4 and sqa.identity["data"] and sqa.identity["lmms_task"] == "scienceqa_img"
    assert [s["answer"] for s in sqa.samples] == ["A."] * 4 and [s["target"] for s in sqa.samples] == list("ABCA")

    sqa8, ai2d8 = _run(tmp_path / "all", None, ["scienceqa_img", "ai2d"], data=data, backend=AnswerBackend("A."))
    assert _values(sqa8) == {"exact_match": 0.375}
    assert [(m.metric, m.variant, m.value) for m in ai2d8.metrics] == [("exact_match", "flexible-extract", 0.25)]
    assert sqa8.config["n"] == 8 and sqa8.config["limit"] is None
    assert sqa8.identity["data"] == sqa.identity["data"] and sqa8.eval_key != sqa.eval_key  # same data, other docs


def test_group_leaves_on_local_data_report_as_group_slash_leaf(adapter, local_data, tmp_path):
    """The built-in group scienceqa_full = [scienceqa, scienceqa_img], each leaf mapped to local data:
    lmms-eval runs it as a group and each leaf reports as scienceqa_full/<leaf>, 3/8 = 0.375 each."""
    data = {"scienceqa": str(local_data["sqa_full"]), "scienceqa_img": str(local_data["sqa_img"])}
    results = _run(tmp_path, None, ["scienceqa_full"], data=data, backend=AnswerBackend("A."))
    assert sorted(r.task for r in results) == ["scienceqa_full/scienceqa", "scienceqa_full/scienceqa_img"]
    assert all(_values(r) == {"exact_match": 0.375} for r in results)
    by_task = {r.task: r for r in results}
    assert by_task["scienceqa_full/scienceqa"].config["data_source"] == str(local_data["sqa_full"].resolve())
    assert {r.config["group"] for r in results} == {"scienceqa_full"}
    assert by_task["scienceqa_full/scienceqa"].samples[0]["key"] == "scienceqa_full/scienceqa/0"


def test_data_mapping_errors_name_the_option(adapter, local_data, tmp_path):
    sqa = str(local_data["sqa_img"])
    with pytest.raises(UserError, match=r"lmms\.data\.scienceqa_full: scienceqa_full is a group of 2 tasks; map "
                                        r"the data of each task instead \(lmms\.data\.scienceqa, lmms\.data\.scienceqa_img\)"):
        _run(tmp_path, None, ["scienceqa_full"], data={"scienceqa_full": sqa})
    with pytest.raises(UserError, match=r"lmms\.data\.scienceqa_imgg: scienceqa_imgg is not a task of this run"):
        _run(tmp_path, None, ["scienceqa_img"], data={"scienceqa_img": sqa, "scienceqa_imgg": sqa})
    with pytest.raises(UserError, match=r"--tasks scienceqa_full: the data of lmms-eval task 'scienceqa' is the hub "
                                        r"dataset .*map lmms\.data\.scienceqa to a local file"):
        _run(tmp_path, None, ["scienceqa_full"], data={"scienceqa_img": sqa})
    with pytest.raises(UserError, match=r"--tasks pope_full,pope_adv: both run lmms-eval task evalsuite_pope_adversarial"):
        _run(tmp_path, None, ["pope_full", "pope_adv"], data={k: sqa for k in ("pope_adv", "pope_pop", "pope_random")})
