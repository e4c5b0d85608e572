"""The engine tests: vLLM in its own environment (docs/engines.md). `make test-engines` runs them (it builds
the environment first); the default `pytest` / `make test` collection leaves them out, since every vLLM
start costs about a minute on a 2-core CPU.

Fixtures build vLLM-compatible tiny checkpoints (`build_tiny_family(..., vllm_compatible=True)`) and one
worker per checkpoint for the whole module.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

if os.environ.get("EVALSUITE_TEST_ENGINES") != "1":  # `make test-engines` sets it
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def vllm_spec():
    """The vLLM environment under test: $EVALSUITE_VLLM_PYTHON, else ~/.cache/evalsuite/vllm-env."""
    from evalsuite.engines.vllm_process import VllmOptions, resolve_engine
    from evalsuite.errors import UserError

    try:
        return resolve_engine("vllm", VllmOptions())
    except UserError as exc:
        pytest.fail(f"{exc} (make test-engines builds it)")


@pytest.fixture(scope="session")
def vllm_ckpts(tmp_path_factory) -> dict[str, Path]:
    from evalsuite.kit.families import build_tiny_family

    root = tmp_path_factory.mktemp("vllm-kit")
    return {arch: build_tiny_family(arch, root / arch, seed=0, vllm_compatible=True) for arch in ("llava", "qwen2_vl")}
