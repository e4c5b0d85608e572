"""The family matrix: every family `evalsuite tiny-ckpt --arch` builds passes build, eval, DPO, SFT and the CSR
search, and each of those paths USES THE IMAGE: the same inputs with the real image and with a flat grey one
give different outputs (eval's first-step scores and greedy answers, DPO sequence log-probs of the policy and
of the reference, the SFT loss, the search's beam scores and the reward pass). A path that dropped the pixels
(or a kit model whose projector, gates or resampler made images never matter) fails here.

One test per family, all in one process, tiny sizes; the full end-to-end runs (store, merge, CSR loop) are
`test_families.py` (slow).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsuite.kit.families import ARCHS

REPO = Path(__file__).resolve().parents[2]
QUESTION = "describe the image ."


@pytest.fixture(scope="module")
def images(world_dir, tmp_path_factory) -> tuple[Path, Path]:
    """(a world image, a flat grey image of the same size)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("images")
    real = sorted((world_dir / "images" / "train").iterdir())[0]
    with Image.open(real) as im:
        Image.new("RGB", im.size, (128, 128, 128)).save(root / "grey.png")
    return real, root / "grey.png"


def _differ(a, b) -> bool:
    import torch

    return not torch.allclose(torch.as_tensor(a).float(), torch.as_tensor(b).float(), atol=0, rtol=0)


# Families whose tiny kit model may give the same greedy answer for the real and the grey image, and why; every
# other family must answer differently (the scores check below still holds for these).
ANSWER_LEVEL_EXEMPT: dict[str, str] = {}


def _check_eval(vlm, real, grey, arch: str) -> None:
    """Eval's own batch encoding and `generate` call: answers are non-empty, the scores follow the image, and
    (at answer level) the greedy answer for the real image is not the grey image's."""
    import torch

    from evalsuite.gen_settings import GenConfig
    from evalsuite.models.vlm import encode_batch, generate, suppressed_token_ids
    from evalsuite.types import GenRequest

    answers = generate(vlm, [GenRequest(key="r", image=str(real), prompt=QUESTION)], GenConfig(max_new_tokens=4),
                       progress=False)
    assert answers[0].strip(), answers
    if arch not in ANSWER_LEVEL_EXEMPT:
        # four world images: a tiny model may answer one of them as it answers grey, not all four
        reals = sorted(real.parent.iterdir())[:4]
        seen = generate(vlm, [GenRequest(key=str(i), image=str(p), prompt=QUESTION) for i, p in enumerate([*reals, grey])],
                        GenConfig(max_new_tokens=8), progress=False)
        assert any(a != seen[-1] for a in seen[:-1]), f"eval: real images answered as the grey one: {seen[-1]!r}"
    scores = []
    for path in (real, grey):
        enc = encode_batch(vlm, [GenRequest(key="x", image=str(path), prompt=QUESTION)])
        with torch.inference_mode():
            out = vlm.model.generate(**enc, max_new_tokens=1, do_sample=False, output_scores=True,
                                     return_dict_in_generate=True, suppress_tokens=suppressed_token_ids(vlm.processor, vlm.model.config, vlm.model.generation_config),
                                     pad_token_id=vlm.tokenizer.pad_token_id)
        scores.append(out.scores[0])
    assert _differ(*scores), "eval: real and grey images give the same scores"


def _check_search(vlm, real, grey) -> None:
    """The CSR search (one group, penalty-free beams) and its teacher-forced reward pass follow the image."""
    from evalsuite.models.vlm import suppressed_token_ids
    from training.csr.generate import (
        Node,
        Tree,
        encode_prompt,
        response_fill,
        sentence_end_ids,
    )
    from training.csr.reward import language_scores
    from training.csr.search import SearchSpec, group_beam_search

    tok = vlm.tokenizer
    spec = SearchSpec(num_beams=3, num_beam_groups=3, diversity_penalty=1.0, max_new_tokens=4,
                      stop_ids=tuple(sentence_end_ids(tok, [".", "!", "?"]) + [tok.eos_token_id]),
                      suppress_ids=tuple(i for i in suppressed_token_ids(vlm.processor, vlm.model.config, vlm.model.generation_config) if i != tok.eos_token_id),
                      pad_id=tok.pad_token_id, response_fill=response_fill(vlm))
    found, lm = [], []
    for path in (real, grey):
        ids, feats = encode_prompt(vlm, path.parent, path.name, QUESTION)
        hyps = group_beam_search(vlm.model, [ids, ids], [feats, feats], spec)
        assert hyps[0] and [h.ids for h in hyps[0]] == [h.ids for h in hyps[1]]  # batch rows are independent
        found.append([h.score for h in hyps[0]])
        sentence = list(hyps[0][0].ids) if not lm else lm[0][1]
        nodes = [Node(0, None, 0, [], [], "", 0.0, 0.0, children=[1]),
                 Node(1, 0, 1, [], sentence, "sentence", 0.0, 0.0)]
        tree = Tree(id="t", image=path.name, question=QUESTION, prompt_ids=ids, nodes=nodes)
        lm.append((language_scores(vlm, [tree], [feats], batch=2)[0][1], sentence))
    assert found[0] != found[1], "search: the same beam scores under real and grey images"
    # the CSR tree generator around that search (its stop/suppress/image ids come from the same processor)
    from training.csr.config import TreeConfig
    from training.csr.generate import TreeGenerator

    cfg = TreeConfig(num_beams=3, num_beam_groups=3, max_new_tokens=3, max_depth=1)
    (tree,) = TreeGenerator(vlm, cfg, real.parent).generate(
        [{"id": "r", "image": real.name, "question": QUESTION}], progress=False)
    assert len(tree.nodes) > 1
    assert lm[0][0] != lm[1][0], "reward pass: same log-prob of one sentence under real and grey images"


def _train_cfg(ckpt: Path, method: str, data: Path, out: Path):
    from training.config import load_config

    return load_config(["--config", str(REPO / "configs" / "train" / "tiny_cpu.yaml"), "--method", method,
                        "--model_name_or_path", str(ckpt), "--data_path", str(data), "--image_root", str(data.parent),
                        "--output_dir", str(out), "--max_steps", "1",
                        "--dataset_name", "plain_dpo" if method == "dpo" else "vlquery_json"])


def _check_dpo(ckpt: Path, real: Path, grey: Path, tmp: Path) -> None:
    import shutil

    import torch

    from training.data import load_examples
    from training.trainers.dpo import build_dpo_trainer
    from training.trainers.model import language_model, load_model_and_processor

    shutil.copy(real, tmp / "real.png")
    shutil.copy(grey, tmp / "grey.png")
    rows = [{"image": name, "prompt": QUESTION, "chosen": "a dog on a bed .", "rejected": "a cat under a car ."}
            for name in ("real.png", "grey.png")]
    (tmp / "pairs.json").write_text(json.dumps(rows))
    cfg = _train_cfg(ckpt, "dpo", tmp / "pairs.json", tmp / "dpo")
    train_ds, _, _ = load_examples(cfg)
    model, processor = load_model_and_processor(cfg)
    lm = language_model(model)
    prefix = next(n for n, m in model.named_modules() if m is lm)
    trainer = build_dpo_trainer(cfg, model, processor, train_ds)
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n and f".{prefix}." in n for n in trainable), sorted(trainable)[:3]
    batches = [trainer.data_collator([ex]) for ex in train_ds]
    with torch.no_grad():
        policy = [trainer._sequence_logps(trainer.model, b) for b in batches]
    reference = [torch.cat(trainer.reference_logps(b)) for b in batches]
    assert _differ(*policy), "DPO policy log-probs: real == grey"
    assert _differ(*reference), "DPO reference log-probs: real == grey"
    trainer.train()
    assert trainer.state.global_step == 1


def _check_sft(ckpt: Path, real: Path, grey: Path, tmp: Path) -> None:
    import shutil

    import torch

    from training.data import load_examples
    from training.trainers.model import load_model_and_processor
    from training.trainers.sft import build_sft_trainer

    shutil.copy(real, tmp / "real.png")
    shutil.copy(grey, tmp / "grey.png")
    rows = [{"image": name, "conversations": [{"from": "user", "value": f"<image>\n{QUESTION}"},
                                               {"from": "assistant", "value": "a dog on a bed ."}]}
            for name in ("real.png", "grey.png")]
    (tmp / "sft.json").write_text(json.dumps(rows))
    cfg = _train_cfg(ckpt, "sft", tmp / "sft.json", tmp / "sft")
    train_ds, _, _ = load_examples(cfg)
    model, processor = load_model_and_processor(cfg)
    trainer = build_sft_trainer(cfg, model, processor, train_ds)
    with torch.no_grad():
        losses = [trainer.compute_loss(trainer.model, trainer.data_collator([ex])) for ex in train_ds]
    assert all(torch.isfinite(x) for x in losses) and _differ(*losses), "SFT loss: real == grey"
    trainer.train()
    assert trainer.state.global_step == 1


@pytest.mark.parametrize("arch", ARCHS)
def test_family_uses_the_image_in_every_path(arch, images, tmp_path):
    from evalsuite.kit.families import build_tiny_family
    from evalsuite.models.vlm import load_vlm

    real, grey = images
    ckpt = build_tiny_family(arch, tmp_path / "ckpt", seed=0)
    vlm = load_vlm(ckpt, device="cpu")
    _check_eval(vlm, real, grey, arch)
    _check_search(vlm, real, grey)
    del vlm
    for name, check in (("dpo", _check_dpo), ("sft", _check_sft)):
        (tmp_path / name).mkdir()
        check(ckpt, real, grey, tmp_path / name)


def test_answer_level_exemptions_name_kit_families():
    assert set(ANSWER_LEVEL_EXEMPT) <= set(ARCHS) and all(ANSWER_LEVEL_EXEMPT.values())


@pytest.mark.parametrize("arch", [a for a in ARCHS if a != "llava"])
def test_kit_builds_no_zero_projector_or_gate(arch, tmp_path):
    """A fresh model leaves some image paths at zero (Gemma3's mm_input_projection_weight, Mllama's
    cross-attention gates); the kit's checkpoints never do."""
    from safetensors.torch import load_file

    from evalsuite.kit.families import build_tiny_family

    weights = load_file(build_tiny_family(arch, tmp_path / "ckpt", seed=0) / "model.safetensors")
    dead = [k for k, v in weights.items() if v.is_floating_point() and (v.dim() >= 2 or v.numel() == 1)
            and not v.any()]
    assert dead == []


def test_encoder_decoder_is_refused_in_one_line_before_loading(world_dir, tmp_path):
    """Florence-2 (transformers-native, encoder-decoder): eval, training and CSR (which loads through eval's
    `load_vlm`) refuse it before reading weights, in one line naming config.is_encoder_decoder: its answers
    would otherwise be cut at the prompt length, all empty."""
    import torch
    from safetensors.torch import save_file
    from transformers import Florence2Config

    from evalsuite.errors import UserError
    from evalsuite.models.vlm import load_vlm
    from tests.conftest import run_cli
    from training.trainers.model import _check_checkpoint

    ckpt = tmp_path / "florence2"
    Florence2Config().save_pretrained(ckpt)
    save_file({"w": torch.zeros(1)}, ckpt / "model.safetensors")  # never read: refused before loading
    with pytest.raises(UserError, match=r"is an encoder-decoder \(config.is_encoder_decoder\)"):
        load_vlm(ckpt, device="cpu")
    with pytest.raises(UserError, match=r"^model_name_or_path: .*config.is_encoder_decoder"):
        _check_checkpoint(ckpt)
    res = run_cli("run", "--ckpt", str(ckpt), "--tasks", "caption", "--data-root", str(world_dir), "--limit", "2",
                  "--output", str(tmp_path / "out"), "--store", str(tmp_path / "store"), "--device", "cpu")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr[-2000:]
    assert "config.is_encoder_decoder" in res.stderr


def test_floating_inputs_reach_the_model_in_its_dtype(tiny_vlm_dir):
    """A processor that returns bfloat16 pixels for a float32 model (or the reverse): eval and training cast
    floating inputs to the model's dtype before its forward (the search goes through `to_device` likewise)."""
    import torch
    from PIL import Image

    from evalsuite.gen_settings import GenConfig
    from evalsuite.models.vlm import generate, load_vlm
    from evalsuite.types import GenRequest
    from training.trainers.model import cast_floating_inputs

    vlm = load_vlm(tiny_vlm_dir, device="cpu")
    encode = vlm.inputs.encode

    def bf16_pixels(*args, **kwargs):
        enc = encode(*args, **kwargs)
        enc["pixel_values"] = enc["pixel_values"].to(torch.bfloat16)
        return enc

    vlm.inputs.encode = bf16_pixels
    seen: list = []
    model_generate = vlm.model.generate

    def generate_spy(**kw):
        seen.append(kw["pixel_values"].dtype)
        return model_generate(**kw)

    vlm.model.generate = generate_spy
    image = Image.new("RGB", (32, 32), (9, 99, 199))
    assert generate(vlm, [GenRequest(key="a", image=image, prompt=QUESTION)], GenConfig(max_new_tokens=2),
                    progress=False)
    assert seen == [torch.float32]  # eval: encode_batch cast the processor's bfloat16 pixels
    enc = bf16_pixels([vlm.inputs.prompt(QUESTION)], [image])
    hook = vlm.model.register_forward_pre_hook(lambda m, args, kw: seen.append(kw["pixel_values"].dtype),
                                               with_kwargs=True)
    seen.clear()
    vlm.model(**enc)
    assert seen == [torch.bfloat16]  # a forward outside those paths sees what the processor gave
    hook.remove()
    cast_floating_inputs(vlm.model)  # what training's load_model_and_processor installs
    vlm.model.register_forward_pre_hook(lambda m, args, kw: seen.append(kw["pixel_values"].dtype), with_kwargs=True)
    seen.clear()
    vlm.model(**enc)
    assert seen == [torch.float32]


def test_plain_lm_head_path_equals_the_fused_one(tiny_vlm_dir, images, tmp_path, monkeypatch):
    """The plain path BLIP-2/InstructBLIP take (full logits) gives the DPO log-probs and SFT loss that TRL's
    fused LM head gives on a model where both run (LLaVA)."""
    import shutil

    import torch

    import training.trainers.model as model_mod
    from training.data import load_examples
    from training.trainers.dpo import build_dpo_trainer
    from training.trainers.model import load_model_and_processor
    from training.trainers.sft import build_sft_trainer

    real, _ = images
    shutil.copy(real, tmp_path / "real.png")
    (tmp_path / "pairs.json").write_text(json.dumps([{"image": "real.png", "prompt": QUESTION,
                                                     "chosen": "a dog on a bed .", "rejected": "a cat ."}]))
    (tmp_path / "sft.json").write_text(json.dumps([{"image": "real.png", "conversations": [
        {"from": "user", "value": f"<image>\n{QUESTION}"}, {"from": "assistant", "value": "a dog on a bed ."}]}]))
    got = {}
    for method, data, build in (("dpo", "pairs.json", build_dpo_trainer), ("sft", "sft.json", build_sft_trainer)):
        cfg = _train_cfg(tiny_vlm_dir, method, tmp_path / data, tmp_path / method)
        train_ds, _, _ = load_examples(cfg)
        model, processor = load_model_and_processor(cfg)
        trainer = build(cfg, model, processor, train_ds)
        batch = trainer.data_collator([train_ds[0]])
        for fused in (True, False):
            monkeypatch.setattr(model_mod, "fused_head_fits", lambda m, fused=fused: fused)
            with torch.no_grad():
                got[method, fused] = (trainer._sequence_logps(trainer.model, batch) if method == "dpo"
                                      else trainer.compute_loss(trainer.model, batch))
    assert torch.allclose(got["dpo", True], got["dpo", False], atol=1e-4)
    assert torch.allclose(got["sft", True], got["sft", False], atol=1e-4)
