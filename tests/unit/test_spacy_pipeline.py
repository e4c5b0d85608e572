"""The one spaCy loader and identity (evalsuite/metrics/spacy_pipeline.py) as AMBER and Object HalBench bind
them: each task's own check and option name in its messages, and the identities eval keys hold (pinned on the
committed test pipelines: a change here is a new key for every stored AMBER / objhal result)."""
from __future__ import annotations

from pathlib import Path

import pytest

from evalsuite.errors import UserError
from evalsuite.identity import digest
from evalsuite.metrics import amber, objhal

DATA = Path(__file__).resolve().parents[1] / "data"
spacy = pytest.importorskip("spacy")


def test_identities_pinned():
    a = amber.pipeline_identity(amber.load_pipeline(str(DATA / "amber" / "pipeline")))
    o = objhal.pipeline_identity(objhal.load_pipeline(str(DATA / "objhal" / "pipeline")))
    v = spacy.__version__
    assert a == {"pipeline": "en_core_web_lg", "version": "0.0.1", "spacy": v, "vectors": "924e738e2f0975ce",
                 "vectors_shape": [100, 17]}
    assert list(a) == ["pipeline", "version", "spacy", "vectors", "vectors_shape"]
    assert o == {"pipeline": "en_core_web_trf", "version": "0.0.1", "spacy": v, "files": "0dee5af9129069d3"}
    if v == "3.8.16":   # the digests eval keys hold under the spaCy version the pins were taken with
        assert (digest(a), digest(o)) == ("3f3d6c5824e5ed1f", "4169ea937f43a25e")


def test_each_task_its_own_check(tmp_path):
    """AMBER needs vectors (the objhal pipeline has none); objhal needs tags and lemmas (a blank one has none)."""
    with pytest.raises(UserError, match=r"^amber\.spacy_model: .*pipeline: the pipeline has no word vectors; "
                                        r"AMBER's synonym check needs vectors"):
        amber.load_pipeline(str(DATA / "objhal" / "pipeline"))
    spacy.blank("en").to_disk(tmp_path / "blank")
    with pytest.raises(UserError, match=r"^objhal\.spacy_model: .*blank: the pipeline sets no part-of-speech tags "
                                        r"or lemmas"):
        objhal.load_pipeline(str(tmp_path / "blank"))


@pytest.mark.parametrize("load,option", [(amber.load_pipeline, "amber.spacy_model"),
                                         (objhal.load_pipeline, "objhal.spacy_model")])
def test_bad_names(tmp_path, load, option):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.cfg").write_text("[nlp\n")
    with pytest.raises(UserError, match=rf"^{option}: .*broken: cannot load this spaCy pipeline \("):
        load(str(tmp_path / "broken"))
    with pytest.raises(UserError, match=rf"^{option}: 'en_core_web_xx' is neither an installed spaCy pipeline nor "
                                        r"a directory; on a connected machine: `python -m spacy download en_core_web_xx`"):
        load("en_core_web_xx")
