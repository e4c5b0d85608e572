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


@pytest.fixture(scope="session")
def objhal_prompts(world_dir, tmp_path_factory) -> Path:
    """An Object HalBench prompt file (the released fields) over the world's first 4 val images, each inline
    as base64. Paths are not in objhal's identity, so every engine test may share it."""
    import base64
    import json

    coco = json.loads((world_dir / "annotations" / "instances_val.json").read_text())
    images = sorted(coco["images"], key=lambda im: im["id"])[:4]
    path = tmp_path_factory.mktemp("objhal-prompts") / "obj_halbench.jsonl"
    path.write_text("".join(json.dumps({"image_id": im["id"], "question": "Describe this image in detail.",
                                        "image": base64.b64encode((world_dir / "images" / "val" / im["file_name"])
                                                                  .read_bytes()).decode()}) + "\n" for im in images))
    return path
