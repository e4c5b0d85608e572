"""lmms-eval integration: evalsuite's tasks run through lmms-eval's own evaluator and scoring, offline.

lmms_eval is imported once for this module (~15 s); everything after that is seconds. Data: a
hand-made MME/POPE world (parquet written with datasets.Dataset.to_parquet, lmms-eval's columns) and
the synthetic world of `evalsuite world build` (fixture `world_dir`).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from evalsuite.errors import UserError


@pytest.fixture(scope="module", autouse=True)
def _scratch_caches(tmp_path_factory):
    # before lmms_eval / datasets resolve their cache dirs: keep Arrow copies and request pickles here
    scratch = tmp_path_factory.mktemp("lmms-hf")
    old = {k: os.environ.get(k) for k in ("HF_HOME", "LM_HARNESS_CACHE_PATH", "HF_DATASETS_CACHE")}
    os.environ["HF_HOME"] = str(scratch / "hf")
    os.environ["HF_DATASETS_CACHE"] = str(scratch / "hf" / "datasets")
    os.environ["LM_HARNESS_CACHE_PATH"] = str(scratch / "requests")
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def adapter():
    from evalsuite.lmms import backend as lmms_backend

    lmms_backend.import_evaluator()
    return lmms_backend


MME_CATS = ["existence", "color", "count", "code_reasoning"]   # 3 perception + 1 cognition


@pytest.fixture(scope="module")
def mini_world(tmp_path_factory) -> Path:
    """W/questions/: MME 4 images x (Yes, No) questions; POPE 4 questions (yes, no, yes, no) per sampling."""
    import datasets
    from PIL import Image

    root = tmp_path_factory.mktemp("mini-world")
    (root / "questions").mkdir()
    imgs = [Image.new("RGB", (32, 32), (60 * i, 20, 200 - 40 * i)) for i in range(4)]
    mme = [{"question_id": f"{c}/img{i}.png", "image": imgs[i], "question": f"Is it {c}? Please answer yes or no.",
            "answer": ans, "category": c} for i, c in enumerate(MME_CATS) for ans in ("Yes", "No")]
    _to_parquet(datasets, mme, root / "questions" / "mme_val.parquet")
    for setting in ("random", "popular", "adversarial"):
        pope = [{"question_id": str(k), "image_source": f"img{k}", "image": imgs[k],
                 "question": "Is there a cat in the image?", "answer": "yes" if k % 2 == 0 else "no",
                 "category": setting} for k in range(4)]
        _to_parquet(datasets, pope, root / "questions" / f"pope_val_{setting}.parquet")
    return root


def _to_parquet(datasets, rows, path):
    datasets.Dataset.from_list(rows).cast_column("image", datasets.Image()).to_parquet(str(path))


class AnswerBackend:
    """Deterministic model: answers `answer` (or answer_fn(GenRequest)); counts what it generates."""

    device = "cpu"

    def __init__(self, answer="Yes", fingerprint="yes-model", answer_fn=None, fail_after_calls=None):
        self.answer, self.fingerprint, self.name = answer, fingerprint, fingerprint
        self.answer_fn, self.fail_after_calls = answer_fn, fail_after_calls
        self.calls, self.generated, self.gens = 0, [], []

    def generate(self, requests, gen):
        if self.fail_after_calls is not None and self.calls >= self.fail_after_calls:
            raise RuntimeError("CUDA out of memory (simulated)")
        self.calls += 1
        self.gens.append(gen)
        self.generated.extend(r.key for r in requests)
        return [self.answer_fn(r) if self.answer_fn else self.answer for r in requests]

    def loglikelihood(self, pairs):
        return [(-1.0, True) for _ in pairs]


def _run(tmp_path, data_root, names, **kw):
    """iter_lmms_tasks as `evalsuite run` calls it, answers cached under tmp_path/out/.resume/lmms."""
    from evalsuite.lmms.task import iter_lmms_tasks

    kw.setdefault("cache_root", tmp_path / "out" / ".resume" / "lmms")
    kw.setdefault("backend", AnswerBackend())
    return list(iter_lmms_tasks(names, data_root=data_root, **kw))


def _values(result) -> dict[str, float]:
    """The whole set's values (POPE's per-setting rows carry the setting as their variant)."""
    return {m.metric: m.value for m in result.metrics if m.variant is None}


def test_always_yes_gives_lmms_eval_numbers_on_mini_world(adapter, mini_world, tmp_path):
    """Always "Yes". MME: each image's pair (Yes, No) gives acc 50 and acc+ 0, so 50 per category;
    perception = existence + color + count = 150, cognition = code_reasoning = 50.
    POPE (all three samplings, 12 questions, 6 yes): TP 6, FP 6, FN 0 -> accuracy 6/12 = 0.5,
    precision 0.5, recall 1.0, F1 2*0.5*1/(1.5) = 0.6667; the model's yes ratio 1.0 (lmms-eval's
    yes_ratio, the ground truth's 0.5, is replaced); per setting (4 questions, 2 yes) the same."""
    mme, pope = _run(tmp_path, mini_world, ["mme", "pope"])
    assert mme.task == "mme" and pope.task == "pope"
    assert _values(mme) == {"mme_perception_score": 150.0, "mme_cognition_score": 50.0}
    pv = _values(pope)
    assert pv["pope_accuracy"] == 0.5 and pv["pope_precision"] == 0.5 and pv["pope_recall"] == 1.0
    assert pv["pope_f1_score"] == pytest.approx(2 / 3) and pv["model_yes_ratio"] == 1.0 and "pope_yes_ratio" not in pv
    settings = {(m.metric, m.variant): (m.value, m.n) for m in pope.metrics if m.variant}
    three = ("random", "popular", "adversarial")
    assert settings == {**{("pope_accuracy", s): (0.5, 4) for s in three},
                        **{("pope_f1_score", s): (pytest.approx(2 / 3), 4) for s in three},
                        **{("model_yes_ratio", s): (1.0, 4) for s in three}}
    assert {m.n for m in mme.metrics} == {8} and {m.n for m in pope.metrics if not m.variant} == {12}
    assert [m.metric for m in mme.metrics + pope.metrics if not m.higher_is_better] == ["model_yes_ratio"] * 4
    assert mme.version == "0.0" and mme.extra["lmms_eval_version"] == "0.7.3"
    assert mme.extra["lmms_task"] == "evalsuite_mme"
    assert [s["doc_id"] for s in mme.samples] == list(range(8))
    first = mme.samples[0]
    assert first["answer"] == "Yes" and first["target"] == "Yes" and first["image_id"] == "existence/img0.png"
    assert first["prompt"] == "Is it existence?\nAnswer the question using a single word or phrase."
    assert first["mme_perception_score"]["score"] == 1.0
    assert pope.samples[1]["pope_accuracy"]["score"] == 0.0 and pope.samples[1]["image"] == "img1"


def _mme_yes_expectation(parquet: Path) -> tuple[float, float]:
    """MME's definition for an always-Yes model: per category, the mean over images of
    acc (share of the image's questions whose truth is Yes, x100) + acc+ (100 if all are Yes)."""
    import pyarrow.parquet as pq
    from lmms_eval.tasks.mme.utils import eval_type_dict

    rows = pq.read_table(parquet, columns=["question_id", "answer", "category"]).to_pylist()
    per_cat: dict[str, dict[str, list[bool]]] = {}
    for r in rows:
        per_cat.setdefault(r["category"], {}).setdefault(r["question_id"], []).append(r["answer"] == "Yes")
    score = {c: sum(100 * sum(v) / len(v) + 100 * all(v) for v in q.values()) / len(q) for c, q in per_cat.items()}
    return (sum(v for c, v in score.items() if c in eval_type_dict["Perception"]),
            sum(v for c, v in score.items() if c in eval_type_dict["Cognition"]))


def test_always_yes_on_the_synthetic_world(adapter, world_dir, tmp_path):
    """The world's MME is balanced (one Yes, one No per image) so every category scores 50; its POPE
    has 3 present + 3 absent per image, so accuracy 0.5 and F1 2/3 as in the POPE paper's Yes-baseline."""
    mme, pope = _run(tmp_path, world_dir, ["mme", "pope"])
    perception, cognition = _mme_yes_expectation(world_dir / "questions" / "mme_val.parquet")
    assert perception > 0 and cognition > 0
    assert _values(mme) == {"mme_perception_score": perception, "mme_cognition_score": cognition}
    pv = _values(pope)
    assert pv["pope_accuracy"] == 0.5 and pv["pope_recall"] == 1.0
    assert pv["pope_f1_score"] == pytest.approx(2 / 3)


def _mme_override(world: Path) -> dict:
    return {"task": "evalsuite_mme", "dataset_path": "parquet", "dataset_name": None,
            "dataset_kwargs": {"data_files": {"test": [str(world / "questions" / "mme_val.parquet")]}}}


def test_recorded_scores_equal_simple_evaluate(adapter, mini_world, tmp_path):
    """Same predictions two ways: evalsuite's bridge with an always-Yes backend, and raw
    simple_evaluate with lmms-eval's built-in `dummy` model (response=Yes). Every metric and every
    per-sample answer must match; then a doc-dependent answerer through the bridge vs through
    raw simple_evaluate on the same EvalsuiteLMM instance."""
    ev = adapter.import_evaluator()
    raw = ev.simple_evaluate(model="dummy", model_args="response=Yes", tasks=[_mme_override(mini_world)],
                             log_samples=True, bootstrap_iters=100, task_manager=adapter.task_manager())
    (mine,) = _run(tmp_path, mini_world, ["mme"])
    expected = {k.split(",")[0]: v for k, v in raw["results"]["evalsuite_mme"].items()
                if k.endswith(",none") and "_stderr" not in k}
    assert _values(mine) == expected
    assert [s["answer"] for s in mine.samples] == [r["filtered_resps"][0] for r in raw["samples"]["evalsuite_mme"]]

    def odd_no(req):  # "No" on odd doc ids: right on every pair -> 200 per category
        return "No" if int(req.key.rsplit("/", 1)[1]) % 2 else "Yes"

    lm = adapter.make_model(AnswerBackend(answer_fn=odd_no, fingerprint="odd"), batch_size=3)
    raw2 = adapter.evaluate(lm, [_mme_override(mini_world)])
    (mine2,) = _run(tmp_path / "b", mini_world, ["mme"], backend=AnswerBackend(answer_fn=odd_no, fingerprint="odd"))
    expected2 = {k.split(",")[0]: v for k, v in raw2["results"]["evalsuite_mme"].items()
                 if k.endswith(",none") and "_stderr" not in k}
    assert expected2 == {"mme_perception_score": 600.0, "mme_cognition_score": 200.0}
    assert _values(mine2) == expected2


def test_model_failure_keeps_finished_samples_and_resume_regenerates_only_the_rest(adapter, mini_world, tmp_path):
    """batch_size 3 over MME's 8 docs = batches of 3, 3, 2. The model dies on its 3rd call: the first
    6 answers are on disk, the run raises. The rerun generates the missing 2 only; a third run 0.
    Scores equal an uninterrupted run (150 / 50)."""
    from evalsuite.lmms.task import LmmsRunError

    dying = AnswerBackend(fail_after_calls=2)
    with pytest.raises(LmmsRunError, match=r"mme: lmms-eval run failed \(RuntimeError: CUDA out of memory"):
        _run(tmp_path, mini_world, ["mme"], batch_size=3, backend=dying)
    assert len(dying.generated) == 6
    cache_files = list((tmp_path / "out" / ".resume" / "lmms" / "yes-model").glob("evalsuite_mme.*.rank0.jsonl"))
    assert len(cache_files) == 1 and len(cache_files[0].read_text().splitlines()) == 6

    second = AnswerBackend()
    (res,) = _run(tmp_path, mini_world, ["mme"], batch_size=3, backend=second)
    assert len(second.generated) == 2 and res.extra["responses"] == {"generated": 2, "cached": 6}
    assert _values(res) == {"mme_perception_score": 150.0, "mme_cognition_score": 50.0}
    third = AnswerBackend()
    (res3,) = _run(tmp_path, mini_world, ["mme"], batch_size=3, backend=third)
    assert third.generated == [] and res3.extra["responses"] == {"generated": 0, "cached": 8}


def test_gen_kwargs_and_limit_pass_through(adapter, mini_world, tmp_path):
    """--gen-kwargs max_new_tokens=3 overrides the yaml's 16; --limit 4 runs 4 docs (2 whole pairs:
    existence 50 + color 50 = perception 100, no cognition docs -> its aggregate is 0)."""
    backend = AnswerBackend()
    (res,) = _run(tmp_path, mini_world, ["mme"], limit=4, gen_kwargs="max_new_tokens=3", backend=backend)
    assert {g.max_new_tokens for g in backend.gens} == {3}
    assert {g.do_sample for g in backend.gens} == {False}
    assert len(res.samples) == 4 and res.config["gen_kwargs"] == "max_new_tokens=3"
    assert res.config["limit"] == 4 and res.config["n"] == 4 and res.config["n_total"] == 8
    assert res.identity["limit"] == 4 and res.identity["gen_kwargs"] == {"max_new_tokens": 3}   # typed, not the text
    assert _values(res)["mme_perception_score"] == 100.0


def test_data_option_accepts_save_to_disk_and_explicit_files(adapter, mini_world, tmp_path):
    import datasets

    disk = tmp_path / "mme_disk"
    ds = datasets.load_dataset("parquet", data_files={"test": str(mini_world / "questions" / "mme_val.parquet")},
                               cache_dir=str(tmp_path / "c"))
    ds.save_to_disk(str(disk))
    for spec in (str(disk), [str(mini_world / "questions" / "mme_val.parquet")]):
        (res,) = _run(tmp_path / str(abs(hash(str(spec)))), None, ["mme"], data={"mme": spec})
        assert _values(res) == {"mme_perception_score": 150.0, "mme_cognition_score": 50.0}


def test_errors_name_the_task_and_the_option(adapter, mini_world, tmp_path, monkeypatch):
    empty = tmp_path / "empty-world"
    empty.mkdir()
    with pytest.raises(UserError, match=r"--tasks pope: local data not found: .*pope_val_random.parquet.*--data-root"):
        _run(tmp_path, empty, ["pope"])
    with pytest.raises(UserError, match=r"--tasks mme: no local data; pass --data-root"):
        _run(tmp_path, None, ["mme"])
    with pytest.raises(UserError, match=r"lmms\.data\.mme: .*nope.parquet does not exist"):
        _run(tmp_path, None, ["mme"], data={"mme": str(tmp_path / "nope.parquet")})
    with pytest.raises(UserError, match=r"--limit 3: mme scores question pairs"):
        _run(tmp_path, mini_world, ["mme"], limit=3)
    with pytest.raises(UserError, match=r"--tasks no_such_task: unknown task"):
        _run(tmp_path, mini_world, ["mme", "no_such_task"])
    from evalsuite.lmms.task import validate_task_names

    with pytest.raises(UserError, match=r"--tasks nosuch: unknown task \(not an evalsuite task \(caption, mme"):
        validate_task_names(["mme", "nosuch", "ok_vqa_val2014"], known_own=["caption"])
    # a built-in task whose hub data is not cached: fails before lmms-eval's download retry loop (tenacity:
    # up to 5 tries 2 s apart, 8-75 s), seen as no back-off sleep of a second or more asked for (the elapsed
    # time, which a loaded machine stretches, is not what is checked)
    adapter.task_manager(include_defaults=True)  # index the ~2000 built-in yamls first
    real_sleep, backoffs = time.sleep, []

    def sleep(seconds):
        if seconds >= 1:
            backoffs.append(seconds)   # not slept: the test stays short if it fails
        else:
            real_sleep(seconds)        # a file lock's polling

    monkeypatch.setattr(time, "sleep", sleep)
    with pytest.raises(UserError, match=r"--tasks ok_vqa_val2014: .*hub dataset .* not in the local HF cache.*"
                                        r"map lmms\.data\.ok_vqa_val2014"):
        _run(tmp_path, mini_world, ["ok_vqa_val2014"])
    assert backoffs == []


def _canon(obj):
    # the built-in's `!function utils.f` loads utils.py by file path (a fresh module object), ours
    # imports lmms_eval.tasks.<t>.utils: the same function is the same (source file, name)
    import inspect

    if callable(obj):
        return ("fn", os.path.realpath(inspect.getsourcefile(obj)), obj.__qualname__)
    if isinstance(obj, dict):
        return {k: _canon(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_canon(v) for v in obj]
    return obj


def test_shipped_yamls_equal_the_builtin_tasks_except_data(adapter):
    """evalsuite_* yamls (the POPE ones through `include: _pope_base.yaml`) must score exactly like
    lmms-eval's mme / pope: same functions (by identity), prompts, generation kwargs and metrics; only
    task name, dataset fields and metadata differ."""
    import lmms_eval.tasks as lt
    from lmms_eval.utils import load_yaml_config

    builtin_dir = Path(lt.__file__).parent
    pairs = {"evalsuite_mme": "mme/mme.yaml", "evalsuite_pope": "pope/pope.yaml",
             "evalsuite_pope_random": "pope/pope.yaml", "evalsuite_pope_popular": "pope/pope.yaml",
             "evalsuite_pope_adversarial": "pope/pope.yaml"}
    for ours, theirs in pairs.items():
        mine = load_yaml_config(str(adapter.YAML_DIR / f"{ours}.yaml"), mode="full")
        ref = load_yaml_config(str(builtin_dir / theirs), mode="full")
        skip = {"task", "dataset_path", "dataset_name", "dataset_kwargs", "metadata", "lmms_eval_specific_kwargs"}
        assert _canon({k: v for k, v in mine.items() if k not in skip}) == _canon(
            {k: v for k, v in ref.items() if k not in skip})
        assert mine["lmms_eval_specific_kwargs"]["default"] == ref["lmms_eval_specific_kwargs"]["default"]
        assert mine["task"] == ours
    # the local group has the built-in group's members, each as evalsuite's local counterpart
    from evalsuite.tasks.registry import local_name

    group = load_yaml_config(str(adapter.YAML_DIR / "evalsuite_pope_full.yaml"), mode="simple")
    ref_group = load_yaml_config(str(builtin_dir / "pope" / "pope_full.yaml"), mode="simple")
    assert [local_name(t) for t in group["task"]] == ref_group["task"] == ["pope_adv", "pope_pop", "pope_random"]


def test_entry_point_registers_the_evalsuite_model(adapter):
    """pyproject's `lmms_eval.models` entry point (what `pip install` registers) resolves `--model evalsuite`."""
    import importlib

    import tomllib
    from lmms_eval.models import MODEL_REGISTRY_V2, get_model

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    module, _, attr = pyproject["project"]["entry-points"]["lmms_eval.models"]["evalsuite"].partition(":")
    (manifest,) = getattr(importlib.import_module(module), attr)()
    MODEL_REGISTRY_V2.register_manifest(manifest, overwrite=True)
    cls = get_model("evalsuite")
    assert cls is adapter.EvalsuiteLMM and cls.__module__ == "evalsuite.lmms.backend"
    assert repr(adapter.make_model(AnswerBackend(fingerprint="abc123"))) == "EvalsuiteLMM(ckpt=abc123)"


def test_tiny_checkpoint_end_to_end(adapter, tiny_vlm_dir, world_dir, tmp_path):
    """The real path: the tiny LLaVA answers MME and POPE (8 docs each) through lmms-eval's scoring;
    a rerun regenerates nothing and reproduces the scores exactly."""
    from evalsuite.lmms.task import iter_lmms_tasks

    kw = dict(ckpt=str(tiny_vlm_dir), data_root=world_dir, limit=8, batch_size=4, cache_root=tmp_path / "cache")
    first = list(iter_lmms_tasks(["mme", "pope"], **kw))
    assert [r.task for r in first] == ["mme", "pope"]
    for r in first:
        assert len(r.samples) == 8 and all(isinstance(s["answer"], str) for s in r.samples)
        assert r.extra["responses"] == {"generated": 8, "cached": 0}
    # the accuracy is the share of the 8 questions whose parsed answer equals the truth
    parsed = [s["pope_accuracy"] for s in first[1].samples]
    right = sum(str(p["prediction"]).strip().lower() == str(p["ground_truth"]).strip().lower() for p in parsed)
    assert _values(first[1])["pope_accuracy"] == pytest.approx(right / 8)
    again = list(iter_lmms_tasks(["mme", "pope"], **kw))
    assert [r.extra["responses"] for r in again] == [{"generated": 0, "cached": 8}] * 2
    assert [_values(r) for r in again] == [_values(r) for r in first]
    assert [s["answer"] for s in again[0].samples] == [s["answer"] for s in first[0].samples]


def test_tiny_checkpoint_loglikelihood_matches_its_greedy_answer(adapter, tiny_vlm_dir, world_dir):
    """The greedy 1-token answer of the tiny model must be reported as greedy, with the log-prob
    of its argmax token (< 0); another continuation is less likely and not greedy."""
    from evalsuite.gen_settings import GenConfig
    from evalsuite.models.loglik import loglikelihood
    from evalsuite.models.vlm import generate, load_vlm
    from evalsuite.types import GenRequest

    vlm = load_vlm(tiny_vlm_dir, device="cpu")
    image = next((world_dir / "images" / "val").glob("*.png"))
    req = GenRequest("k", str(image), "what is in the image ?")
    (word,) = generate(vlm, [req], GenConfig(max_new_tokens=1), progress=False)
    assert word
    ids = vlm.tokenizer(word, add_special_tokens=False)["input_ids"]
    other = next(t for t in ["cat", "dog", "red", "blue", "two"] if t != word)
    (lp_greedy, is_greedy), (lp_other, other_greedy) = loglikelihood(vlm, [(req, " " + word), (req, " " + other)])
    assert len(ids) == 1 and is_greedy and lp_greedy < 0
    assert lp_other < lp_greedy and not other_greedy


def test_shared_cache_never_serves_another_worlds_answers(adapter, mini_world, world_dir, tmp_path):
    """One cache dir for two worlds: the same doc ids and checkpoint, other files -> all regenerated."""
    shared = tmp_path / "shared-cache"
    (a,) = _run(tmp_path / "a", mini_world, ["mme"], cache_root=shared)
    (b,) = _run(tmp_path / "b", world_dir, ["mme"], limit=8, cache_root=shared)
    assert a.extra["responses"] == {"generated": 8, "cached": 0}
    assert b.extra["responses"] == {"generated": 8, "cached": 0}
    (c,) = _run(tmp_path / "c", mini_world, ["mme"], cache_root=shared)
    assert c.extra["responses"] == {"generated": 0, "cached": 8}


def test_model_args_route_of_the_lmms_eval_cli(adapter, tiny_vlm_dir, mini_world):
    """`lmms-eval --model evalsuite --model_args pretrained=DIR,batch_size=2` builds the model this way; the
    CLI's own --batch_size (default 1) comes as additional config, and model_args win over it."""
    lm = adapter.EvalsuiteLMM.create_from_arg_string(f"pretrained={tiny_vlm_dir},batch_size=2",
                                                     {"batch_size": "1", "device": "cpu", "max_batch_size": None})
    assert lm.batch_size == 2 and str(lm.device) == "cpu" and lm.cache_dir is None
    raw = adapter.evaluate(lm, [_mme_override(mini_world)])
    assert len(raw["samples"]["evalsuite_mme"]) == 8 and lm.counts == {"generated": 8, "cached": 0}
    assert adapter.EvalsuiteLMM.create_from_arg_string("", {"backend": AnswerBackend(), "batch_size": 3}).batch_size == 3
    with pytest.raises(ValueError, match="unknown model_args temprature"):
        adapter.EvalsuiteLMM.create_from_arg_string(f"pretrained={tiny_vlm_dir},temprature=0")
    with pytest.raises(ValueError, match="batch_size='auto'"):
        adapter.EvalsuiteLMM.create_from_arg_string("", {"backend": AnswerBackend(), "batch_size": "auto"})
