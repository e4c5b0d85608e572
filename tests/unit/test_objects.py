"""Per-object hallucination (evalsuite/store/objects.py) and `evalsuite table --by object`: counts and rates
worked by hand, the paired CI's properties, the md/csv output, and bad input."""
from __future__ import annotations

import csv
import io

import pytest

from evalsuite.errors import UserError
from evalsuite.store import Store
from evalsuite.store import objects
from evalsuite.tasks.chair import METRICS as CHAIR_METRICS
from evalsuite.tasks.metric_spec import score, specs_extra
from evalsuite.types import MetricValue, TaskResult


def chair_records(captions: list[tuple[list[str], list[str]]]) -> list[dict]:
    """CHAIR-task records from (mentioned objects, GT objects) per image: a mention not in the GT is
    hallucinated (as metrics.chair.score_caption decides), entries are [word, object] pairs."""
    out = []
    for i, (mentioned, gt) in enumerate(captions):
        hal = [[o, o] for o in mentioned if o not in gt]
        out.append({"key": f"img{i}", "image_id": i, "image": f"img_{i}.png", "prompt": "Describe.",
                    "answer": " and ".join(mentioned) or "nothing", "mentions": [[o, o] for o in mentioned],
                    "hallucinated": hal, "gt_objects": sorted(set(gt)),
                    "recalled": sorted(set(gt) & set(mentioned)), "n_tokens": 2 * len(mentioned) + 1,
                    "CHAIRs": int(bool(hal)), "CHAIRi": len(hal) / len(mentioned) if mentioned else 0.0})
    return out


def chair_result(captions, variant="original", identity=None) -> TaskResult:
    recs = chair_records(captions)
    return TaskResult("chair", "1", score(recs, CHAIR_METRICS, n_boot=0, variant=variant), samples=recs,
                      identity=identity or {"variant": variant}, extra={"metric_specs": specs_extra(CHAIR_METRICS)})


def write(store: Store, it: int, results: list[TaskResult], name: str | None = None) -> str:
    name = name or f"iter_{it}"
    return store.write_run({"ckpt": f"/ck/{name}", "ckpt_hash": f"{it:064x}", "iteration": it, "method": "csr",
                            "parent": f"/ck/iter_{it - 1}" if it else None, "label": name, "config": {}}, results)


# hand-worked: base image 0 says dog + cat (GT dog), image 1 dog, dog, car (GT dog), image 2 cat (GT cat)
BASE = [(["dog", "cat"], ["dog"]), (["dog", "dog", "car"], ["dog"]), (["cat"], ["cat"])]
LATER = [(["dog"], ["dog"]), (["dog", "car"], ["dog", "car"]), (["cat"], ["cat"])]


@pytest.fixture
def small(tmp_path) -> Store:
    store = Store(tmp_path / "store")
    write(store, 0, [chair_result(BASE)])
    write(store, 1, [chair_result(LATER)])
    return store


def test_counts_and_rates_by_hand(small):
    """base: dog 3 mentions, 0 hallucinated, in 2 images; cat 2 mentions, 1 hallucinated (image 0), 2 images;
    car 1 mention, hallucinated. iter_1: dog 3/0, cat 1/0, car 1/0 (image 1's GT has a car there).
    Δ: cat 0 - 1/2 = -0.5, car 0 - 1 = -1, dog 0."""
    (c,) = objects.compare_store(small.snapshot(), task="chair", n_boot=200)
    assert (c.base, c.vs, c.n_images, c.variant) == ("iter_0", "iter_1", 3, "original")
    by = {r.object: r for r in c.rows}
    assert by["dog"].base == {"mentions": 3, "hallucinated": 0, "images": 2, "rate": 0.0}
    assert by["cat"].base == {"mentions": 2, "hallucinated": 1, "images": 2, "rate": 0.5}
    assert by["car"].base == {"mentions": 1, "hallucinated": 1, "images": 1, "rate": 1.0}
    assert by["cat"].vs == {"mentions": 1, "hallucinated": 0, "images": 1, "rate": 0.0}
    assert [(r.object, r.delta) for r in c.rows] == [("car", -1.0), ("cat", -0.5), ("dog", 0.0)]
    # the objects' counts add up to CHAIR_i's: 2 hallucinated of 6 mentions in the base
    assert sum(r.base["hallucinated"] for r in c.rows) == 2 and sum(r.base["mentions"] for r in c.rows) == 6
    # dog is never hallucinated by either: every replicate's Δ is 0
    assert (by["dog"].low, by["dog"].high, by["dog"].significant) == (0.0, 0.0, False)
    assert [s["name"] for s in c.series] == ["iter_0", "iter_1"]
    assert c.series[1]["objects"]["car"] == {"mentions": 1, "hallucinated": 0, "images": 1, "rate": 0.0}


def test_plain_object_names_count_like_pairs():
    """A task writing object names instead of [word, object] pairs (amber_g) is read the same way."""
    pairs = objects.unit_counts([{"key": "a", "mentions": [["puppy", "dog"], ["cat", "cat"]],
                                  "hallucinated": [["cat", "cat"]]}])
    names = objects.unit_counts([{"key": "a", "mentions": ["dog", "cat"], "hallucinated": ["cat"]}])
    assert pairs == names == {"a": {"dog": [0, 1], "cat": [1, 1]}}
    assert objects.unit_counts([{"key": "b", "answer": "yes"}]) == {}


def unlearned(n=40):
    """Images 0..n/2-1 show a dog and a cat; the rest a dog only. The base mentions a cat in every image
    (hallucinated in the second half: rate 0.5); the later checkpoint only where there is one (rate 0)."""
    half = n // 2
    base = [(["dog", "cat"], ["dog", "cat"] if i < half else ["dog"]) for i in range(n)]
    later = [(["dog", "cat"] if i < half else ["dog"], ["dog", "cat"] if i < half else ["dog"]) for i in range(n)]
    return base, later


def test_paired_ci_is_zero_for_a_checkpoint_against_itself(tmp_path):
    base, later = unlearned()
    store = Store(tmp_path / "s")
    write(store, 0, [chair_result(base)])
    write(store, 1, [chair_result(later)])
    (c,) = objects.compare_store(store.snapshot(), task="chair", base="iter_0", vs="iter_0", n_boot=300)
    assert c.base == c.vs == "iter_0"
    for r in c.rows:
        assert (r.delta, r.low, r.high, r.significant) == (0.0, 0.0, 0.0, False)
        assert r.n_defined == 300


def test_paired_ci_of_an_unlearned_object_is_below_zero(tmp_path):
    base, later = unlearned()
    store = Store(tmp_path / "s")
    write(store, 0, [chair_result(base)])
    write(store, 1, [chair_result(later)])
    (c,) = objects.compare_store(store.snapshot(), task="chair", n_boot=500, seed=3)
    cat = next(r for r in c.rows if r.object == "cat")
    assert cat.base["rate"] == 0.5 and cat.vs["rate"] == 0.0 and cat.delta == -0.5
    assert cat.high < 0 and cat.low <= -0.5 <= cat.high and cat.significant
    assert cat.per_image[0] == -0.5 and cat.per_image[2] < 0
    assert c.top(1)[0].object == "cat"
    # same seed, same interval; another seed, another draw
    again = objects.compare_store(store.snapshot(), task="chair", n_boot=500, seed=3)[0]
    assert next(r for r in again.rows if r.object == "cat").low == cat.low


def test_paired_ci_resamples_images_jointly():
    """Two images; the later checkpoint stops hallucinating in image "a" only. Every replicate draws
    a and b for both checkpoints together: Δ is -1 when a is drawn alone, 0 when b is, -0.5 when both;
    the CI spans [-1, 0] and never leaves it. Hallucinated cats per image: -(times a drawn) / 2, the same."""
    base = {"a": {"cat": [1, 1]}, "b": {"cat": [0, 1]}}
    later = {"a": {"cat": [0, 1]}, "b": {"cat": [0, 1]}}
    d, lo, hi, n, per_image = objects.paired_object_cis(base, later, ["cat"], n_boot=400, seed=0)["cat"]
    assert d == -0.5 and lo == -1.0 and hi == 0.0 and n == 400
    assert per_image == (-0.5, -1.0, 0.0)


def test_an_object_one_checkpoint_never_mentions_is_listed_apart(tmp_path):
    store = Store(tmp_path / "s")
    write(store, 0, [chair_result([(["dog", "cat"], ["dog"]), (["dog"], ["dog"])])])
    write(store, 1, [chair_result([(["dog"], ["dog"]), (["dog"], ["dog"])])])
    (c,) = objects.compare_store(store.snapshot(), task="chair", n_boot=50)
    assert [r.object for r in c.rows] == ["dog"]
    (cat,) = c.one_sided
    assert cat.object == "cat" and cat.delta is None and cat.vs["rate"] is None and cat.base["rate"] == 1.0
    md = objects.to_markdown([c], 10)
    # its hallucinated mentions per image still compare: -1/2, the CI over the draws of the two images
    assert cat.per_image == (-0.5, -1.0, 0.0)
    assert ("Mentioned by one checkpoint only (no rate to compare): cat (iter_0 1.000 (1/1), iter_1 – (0/0); "
            "Δ hal/image -0.500 [-1.000, +0.000])." in md)


# ---- the CLI -------------------------------------------------------------------------------------

def cli(*argv) -> int:
    from evalsuite.cli import main

    return main(["table", *argv])


def many(tmp_path) -> Store:
    """Three checkpoints; cat unlearned, car slightly worse at iter_2, plus a POPE result (no objects)."""
    base, later = unlearned(20)
    worse = [(m + (["car"] if i == 0 else []), g) for i, (m, g) in enumerate(later)]
    store = Store(tmp_path / "store")
    pope = TaskResult("pope", "1", [MetricValue("acc", 0.8, True, 10)],
                      samples=[{"key": f"q{i}", "answer": "yes"} for i in range(10)])
    write(store, 0, [chair_result(base), pope])
    write(store, 1, [chair_result(later)])
    write(store, 2, [chair_result(worse)])
    return store


def test_cli_markdown_top_and_default_pair(tmp_path, capsys):
    store = many(tmp_path)
    assert cli("--store", str(store.path), "--by", "object", "--task", "chair", "--n-boot", "200") == 0
    out = capsys.readouterr().out
    assert "### chair [original]: iter_0 → iter_2" in out     # the lineage's base vs its latest
    lines = [x for x in out.splitlines() if x.startswith("| ")]
    assert lines[1].startswith("| cat | 0.500 (10/20) | 0.000 (0/10) | -0.500 [") and lines[1].endswith("]* | 20 → 10 |")
    # the base mentions a cat in every image: its rate is hallucinated cats per image, so the two columns agree
    assert lines[1].split(" | ")[3] == lines[1].split(" | ")[4]
    assert lines[2].startswith("| dog | 0.000 (0/20) | 0.000 (0/20) | +0.000 [+0.000, +0.000] |")
    assert len(lines) == 3      # header, cat, dog: car (only iter_2 mentions it) is listed apart
    assert "Mentioned by one checkpoint only (no rate to compare): car (iter_0 – (0/0), iter_2 1.000 (1/1); " in out
    assert "paired bootstrap over the 20 images both answered (n_boot 200, seed 0)" in out
    assert cli("--store", str(store.path), "--by", "object", "--task", "chair", "--top", "1", "--vs", "iter_1",
               "--n-boot", "50") == 0
    out = capsys.readouterr().out
    rows = [x for x in out.splitlines() if x.startswith("| ") and not x.startswith("| object")]
    assert len(rows) == 1 and rows[0].startswith("| cat |") and "iter_0 → iter_1" in out
    assert "the 1 of 2 objects whose rate changed most" in out


def test_cli_csv(tmp_path, capsys):
    store = many(tmp_path)
    assert cli("--store", str(store.path), "--by", "object", "--task", "chair", "--format", "csv",
               "--base", "iter_1", "--vs", "iter_2", "--n-boot", "100", "--seed", "4") == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(rows[0]) == objects.CSV_COLUMNS
    by = {r["object"]: r for r in rows}
    assert set(by) == {"cat", "dog", "car"}
    assert by["cat"]["delta"] == "0.0" and by["cat"]["base_mentions"] == "10" and by["cat"]["significant"] == "false"
    assert (by["car"]["vs_mentions"], by["car"]["vs_hallucinated"], by["car"]["delta"]) == ("1", "1", "")
    assert {r["base"] for r in rows} == {"iter_1"} and {r["seed"] for r in rows} == {"4"}
    assert cli("--store", str(store.path), "--by", "object", "--format", "csv", "--top", "1",
               "--n-boot", "20") == 0
    assert [r["object"] for r in csv.DictReader(io.StringIO(capsys.readouterr().out))] == ["cat", "car"]


@pytest.mark.parametrize("argv, message", [
    (["--by", "object", "--task", "pope"], "--task pope: its records have no per-object fields "
                                           "(mentions, hallucinated); tasks with them: chair"),
    (["--by", "object", "--task", "mme"], "--task mme: not in the store (it has: chair, pope)"),
    (["--by", "object", "--variant", "opera"], "--variant opera: no such variant of chair; have: original"),
    (["--by", "object", "--top", "0"], "--top: must be >= 1, got 0"),
    (["--by", "object", "--format", "json"], "--format json: --by object writes md or csv"),
    (["--by", "object", "--metric", "chair/*"], "--metric: has no effect with --by object"),
    (["--by", "object", "--vs", "nope"], "--vs 'nope': no such checkpoint"),
    (["--top", "3"], "--top: only with --by object"),
    (["--vs", "iter_1"], "--vs: only with --by object"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, message):
    store = many(tmp_path)
    assert cli("--store", str(store.path), *argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_no_pair_to_compare_is_a_user_error(tmp_path):
    store = Store(tmp_path / "s")
    write(store, 0, [chair_result(BASE)])
    with pytest.raises(UserError, match="no per-object records of two checkpoints of one lineage"):
        from evalsuite.commands import table
        import argparse

        table.main(argparse.Namespace(store=str(store.path), metric=None, format="md", as_of=None, run=None,
                                      list_versions=False, base=None, samples=True, n_boot=10, seed=0,
                                      by="object", task="chair", variant=None, vs=None, top=None, all=False))


def test_base_and_vs_pick_the_pair_per_setup(tmp_path, capsys):
    """Two variants (two setups, a run each): iter_1 has only `original`. --base iter_0 compares iter_2
    in both; --vs iter_1 compares in `original` only (the one setup both have)."""
    base, later = unlearned(10)
    store = Store(tmp_path / "s")
    for it, caps in ((0, base), (1, later), (2, later)):
        for variant in ("original", "opera") if it != 1 else ("original",):
            write(store, it, [chair_result(caps, variant)])
    comps = objects.compare_store(store.snapshot(), base="iter_0", n_boot=20)
    assert sorted((c.variant, c.vs, len(c.series)) for c in comps) == [("opera", "iter_2", 2),
                                                                      ("original", "iter_2", 3)]
    comps = objects.compare_store(store.snapshot(), vs="iter_1", n_boot=20)
    assert [(c.variant, c.base, c.vs) for c in comps] == [("original", "iter_0", "iter_1")]
    assert cli("--store", str(store.path), "--by", "object", "--variant", "opera", "--vs", "iter_1") == 2
    assert "no per-object records of the base and iter_1 in one setup" in capsys.readouterr().err


def test_markdown_escapes_pipes_in_names(tmp_path):
    store = Store(tmp_path / "s")
    store.write_run({"ckpt": "/ck/iter_0", "ckpt_hash": "0" * 64, "iteration": 0, "label": "x|0", "config": {}},
                    [chair_result([(["a|b"], [])] * 2)])
    write(store, 1, [chair_result([(["a|b"], ["a|b"])] * 2)])
    md = objects.to_markdown(objects.compare_store(store.snapshot(), n_boot=10), 5)
    assert "| a\\|b | 1.000 (2/2) | 0.000 (0/2) | -1.000 [-1.000, -1.000]* |" in md and "x\\|0 → iter_1" in md
