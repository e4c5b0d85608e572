"""Every transformers-native VLM family of the kit, end to end: every supported architecture
through the same entry points, since each family packs its images, positions and prompts differently.

Per family (`evalsuite tiny-ckpt --arch ...`, built offline): `evalsuite run --tasks caption,chair,pope`
gives identical answers at batch size 8 and 1; DPO and SFT with LoRA `auto` train 2 steps and change
every trainable parameter, which are LoRA weights of the language model only; one CSR iteration
(search, reward pass, pairs, DPO, merge) ends in a loadable checkpoint.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsuite.kit.families import ARCHS

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """arch -> its tiny checkpoint, built on first use."""
    from evalsuite.kit.families import build_tiny_family

    root, built = tmp_path_factory.mktemp("families"), {}

    def get(arch: str) -> Path:
        if arch not in built:
            built[arch] = build_tiny_family(arch, root / arch, seed=0)
        return built[arch]

    return get


def _answers(out: Path, task: str) -> list[str]:
    return [json.loads(x)["answer"] for x in (out / task / "samples.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("arch", ARCHS)
def test_eval_answers_do_not_depend_on_batch_size(arch, ckpts, world_dir, punkt_dir, tmp_path):
    """8 documents per task, so batch size 8 really answers a batch of 8 (CHAIR's punkt: `punkt_dir`)."""
    from evalsuite.run import run_eval
    from evalsuite.run_config import load_eval_config

    outs = {}
    for bs in (8, 1):  # a store each: the second run must generate, not reuse the first one's results
        outs[bs] = tmp_path / f"bs{bs}"
        run_eval(load_eval_config([
            "--ckpt", str(ckpts(arch)), "--tasks", "caption,chair,pope", "--data-root", str(world_dir),
            "--output", str(outs[bs]), "--store", str(tmp_path / f"store{bs}"), "--limit", "8",
            "--batch-size", str(bs), "--max-new-tokens", "6", "--gen-kwargs", "max_new_tokens=6",
            "--device", "cpu", "chair.n_images=8", "chair.n_boot=10"])[0])
    for task in ("caption", "chair", "pope"):
        assert _answers(outs[8], task) == _answers(outs[1], task), task
        assert len(_answers(outs[8], task)) == 8, task
    sample = json.loads((outs[8] / "caption" / "samples.jsonl").read_text().splitlines()[0])
    run = json.loads((outs[8] / "run.json").read_text())
    assert sample["prompt_text"] == run["inputs"]["prompt_example"].replace("{question}", sample["prompt"])
    want = arch if arch in ("paligemma", "blip2", "instructblip") else "chat_template"  # template-less formats
    assert run["inputs"]["prompt_format"] == want and run["inputs"]["image_aspect"] == "crop"
    pope = json.loads((outs[8] / "pope" / "samples.jsonl").read_text().splitlines()[0])
    assert pope["prompt_text"].endswith(run["inputs"]["prompt_example"].split("{question}")[1])


def _train_data(world: Path, root: Path) -> tuple[Path, Path]:
    caps = json.loads((world / "annotations" / "captions_train.json").read_text())
    files = {im["id"]: f"images/train/{im['file_name']}" for im in caps["images"]}
    first: dict = {}
    for a in caps["annotations"]:
        first.setdefault(a["image_id"], a["caption"])
    cc = [(files[i], c) for i, c in sorted(first.items())][:4]
    pairs = [{"image": img, "prompt": "describe the image.", "chosen": cap, "rejected": cc[(i + 1) % 4][1]}
             for i, (img, cap) in enumerate(cc)]
    sft = [{"image": img, "conversations": [{"from": "user", "value": "<image>\ndescribe the image."},
                                            {"from": "assistant", "value": cap}]} for img, cap in cc]
    (root / "pairs.json").write_text(json.dumps(pairs))
    (root / "sft.json").write_text(json.dumps(sft))
    return root / "pairs.json", root / "sft.json"


@pytest.mark.parametrize("arch", ARCHS)
def test_dpo_and_sft_train_lora_on_the_language_model_only(arch, ckpts, world_dir, tmp_path):
    import torch

    from training.config import load_config
    from training.data import load_examples
    from training.trainers.dpo import build_dpo_trainer
    from training.trainers.model import PROJECTOR_PARTS, VISION_PARTS, load_model_and_processor
    from training.trainers.sft import build_sft_trainer

    pairs, sft = _train_data(world_dir, tmp_path)
    for method, data, build in (("dpo", pairs, build_dpo_trainer), ("sft", sft, build_sft_trainer)):
        cfg = load_config(["--config", str(REPO / "configs" / "train" / "tiny_cpu.yaml"), "--method", method,
                           "--model_name_or_path", str(ckpts(arch)), "--data_path", str(data),
                           "--image_root", str(world_dir), "--output_dir", str(tmp_path / method),
                           "--dataset_name", "plain_dpo" if method == "dpo" else "vlquery_json"])
        train_ds, _, _ = load_examples(cfg)
        model, processor = load_model_and_processor(cfg)
        trainer = build(cfg, model, processor, train_ds)
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
        assert before and all("lora_" in n for n in before), method
        parts = {part for n in before for part in n.split(".")}
        assert not parts & set(VISION_PARTS + PROJECTOR_PARTS), (method, parts & set(VISION_PARTS + PROJECTOR_PARTS))
        trainer.train()
        after = dict(trainer.model.named_parameters())
        assert [n for n, p in before.items() if torch.equal(p, after[n].detach())] == [], method
        assert trainer.state.global_step == 2


@pytest.mark.parametrize("arch", ARCHS)
def test_one_csr_iteration(arch, ckpts, tiny_clip_dir, world_dir, tmp_path):
    from evalsuite.manifest import read_manifest
    from training.csr.config import load_config
    from training.csr.loop import run_csr

    images = world_dir / "images" / "train"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": p.stem, "image": p.name, "question": "Describe the image."}) + "\n"
                               for p in sorted(images.iterdir())[:4]))
    overrides = [f"model={ckpts(arch)}", f"clip={tiny_clip_dir}", f"prompts={prompts}", f"image_root={images}",
                 f"output_dir={tmp_path / 'run'}", f"store={tmp_path / 'store'}", "iterations=1",
                 "tree.max_depth=2", "tree.max_new_tokens=6", "train.max_steps=2"]
    (merged,) = run_csr(load_config(REPO / "configs" / "csr_tiny.yaml", overrides))
    man = read_manifest(merged)
    assert man["method"] == "csr" and man["parent"] == str(ckpts(arch))
    assert man["config"]["inputs"]["image_aspect"] == "crop"
    assert json.loads((tmp_path / "run" / "iter_1" / "pair_stats.json").read_text())["metrics"]


@pytest.mark.parametrize("arch", ARCHS)
def test_csr_search_and_reward_pass_use_the_models_own_inputs(arch, ckpts, world_dir):
    """One group of 5 beams from our KV-cached search == transformers' beam search on the processor's full
    output (token ids and sequences_scores): the per-row tensors, the cache expansion and the positions
    (Qwen-VL's M-RoPE rows, PaliGemma's 1-based prefix-LM) are the model's own. With no length or
    diversity penalty a beam's score is its mean token log-prob, which the teacher-forced reward pass
    must give again for two left-padded sentences of different lengths in one batch."""
    from evalsuite.models.vlm import load_vlm, suppressed_token_ids
    from training.csr.generate import Node, Tree, encode_prompt, response_fill, sentence_end_ids
    from training.csr.reward import language_scores
    from training.csr.search import SearchSpec, group_beam_search

    vlm = load_vlm(ckpts(arch), device="cpu")
    images = world_dir / "images" / "train"
    image = sorted(images.iterdir())[0].name
    ids, feats = encode_prompt(vlm, images, image, "Describe the image.")
    tok = vlm.tokenizer
    spec = SearchSpec(num_beams=5, num_beam_groups=1, diversity_penalty=0.0, max_new_tokens=6,
                      stop_ids=tuple(sentence_end_ids(tok, [".", "!", "?"]) + [tok.eos_token_id]),
                      suppress_ids=tuple(i for i in suppressed_token_ids(vlm.processor, vlm.model.config, vlm.model.generation_config) if i != tok.eos_token_id),
                      pad_id=tok.pad_token_id, response_fill=response_fill(vlm))
    ours = group_beam_search(vlm.model, [ids], [feats], spec)[0]
    enc = vlm.inputs.encode([vlm.inputs.prompt("Describe the image.")], [_image(images / image)])
    hf = vlm.model.generate(**enc, num_beams=5, num_return_sequences=5, max_new_tokens=6, do_sample=False,
                            eos_token_id=list(spec.stop_ids), suppress_tokens=list(spec.suppress_ids),
                            pad_token_id=spec.pad_id, return_dict_in_generate=True, output_scores=True)
    assert [h.ids for h in ours] == [_strip(s[enc["input_ids"].shape[1]:], spec.pad_id, spec.stop_ids)
                                     for s in hf.sequences]
    assert [h.score for h in ours] == pytest.approx(hf.sequences_scores.tolist(), abs=1e-4)

    a = ours[0]
    b = next((h for h in ours if len(h.ids) != len(a.ids)), ours[1])  # another length: left padding at work
    nodes = [Node(0, None, 0, [], [], "", 0.0, 0.0, children=[1, 2])]
    nodes += [Node(i, 0, 1, [], list(h.ids), "sentence", h.score, h.score) for i, h in ((1, a), (2, b))]
    tree = Tree(id="t", image=image, question="Describe the image.", prompt_ids=ids, nodes=nodes)
    lm = language_scores(vlm, [tree], [feats], batch=2)[0]
    assert [lm[1], lm[2]] == pytest.approx([a.score, b.score], abs=1e-4)


def _strip(seq, pad: int, stops=()) -> tuple[int, ...]:
    """A returned sequence up to its first stop (transformers fills a shorter finished one with an EOS id, not
    always the pad), without trailing pads."""
    ids = seq.tolist()
    cut = next((i for i, t in enumerate(ids) if t in stops), None)
    ids = ids if cut is None else ids[:cut + 1]
    while ids and ids[-1] == pad:
        ids.pop()
    return tuple(ids)


def _image(path):
    from evalsuite.models.vlm import load_image

    return load_image(path)


def test_tiny_ckpt_cli_builds_any_family_deterministically(tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoConfig

    from evalsuite.kit.families import build_tiny_family
    from tests.conftest import cli_inprocess, run_cli

    res = run_cli("tiny-ckpt", "--arch", "gemma3", "--out", str(tmp_path / "a"), "--seed", "3")
    assert res.returncode == 0, res.stderr[-2000:]
    build_tiny_family("gemma3", tmp_path / "b", seed=3)  # another process, same seed: the same weights
    assert AutoConfig.from_pretrained(tmp_path / "a").model_type == "gemma3"
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    res = cli_inprocess("tiny-ckpt", "--kind", "clip", "--arch", "qwen2_vl", "--out", str(tmp_path / "c"))
    assert res.returncode == 2 and res.stderr.strip() == "evalsuite: error: --arch: only for --kind vlm"


def test_eval_records_the_input_settings(tiny_vlm_dir, world_dir, tmp_path):
    """--system-prompt / --image-aspect reach every sample's prompt_text, run.json and the result identity
    (so results under other input settings are never compared with these)."""
    from tests.conftest import cli_inprocess

    system = "please describe the image in detail ."
    out = tmp_path / "run"
    res = cli_inprocess("run", "--ckpt", str(tiny_vlm_dir), "--tasks", "caption", "--data-root", str(world_dir),
                        "--limit", "2", "--max-new-tokens", "4", "--output", str(out), "--store",
                        str(tmp_path / "s"), "--system-prompt", system, "--image-aspect", "pad", "--device", "cpu")
    assert res.returncode == 0, res.stderr[-2000:]
    samples = [json.loads(x) for x in (out / "caption" / "samples.jsonl").read_text().splitlines()]
    assert [s["prompt_text"] for s in samples] == [f"{system} USER: <image>\n{s['prompt']} ASSISTANT:" for s in samples]
    run = json.loads((out / "run.json").read_text())
    assert run["inputs"]["system_prompt"] == system and run["inputs"]["image_aspect"] == "pad"
    assert run["inputs"]["prompt_format"] == "chat_template"
    summary = json.loads((out / "summary.json").read_text())
    # identity by content: the settings that differ from the defaults (a template would enter by its hash)
    assert summary["caption"]["identity"]["inputs"] == {"system_prompt": system, "image_aspect": "pad"}
