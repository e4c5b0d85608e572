"""Golden-test fixtures: an offline NLTK data folder built by evalsuite's own nltk_setup.

It combines the Debian WordNet 3.0 files (`apt-get install -y wordnet-base wordnet-sense-index`)
with the official tagger + punkt tables committed in tests/data/golden/nltk_data (unpacked by the
`official_nltk_data` fixture of tests/conftest.py).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"


@pytest.fixture(scope="session")
def chair_golden() -> Path:
    return GOLDEN / "chair"


@pytest.fixture(scope="session")
def chair_nltk_data(tmp_path_factory, official_nltk_data) -> Path:
    """NLTK data folder (punkt_tab, tagger, WordNet) put first on NLTK's search path for the session."""
    from evalsuite.metrics import nltk_resources, nltk_setup

    missing = [f for f in nltk_setup.WORDNET_FILES if not (nltk_setup.DEBIAN_WORDNET / f).is_file()]
    if missing:
        pytest.skip(f"Debian WordNet files absent in {nltk_setup.DEBIAN_WORDNET} "
                    "(apt-get install -y wordnet-base wordnet-sense-index)")
    out = nltk_setup.build_nltk_data(tmp_path_factory.mktemp("nltk_data"), tagger_from=official_nltk_data)
    os.environ["NLTK_DATA"] = str(out)  # for subprocesses the tests start
    nltk_resources.add_data_dir(out)
    return out
