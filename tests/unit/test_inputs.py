"""The shared input path (evalsuite/models/inputs.py) on the tiny kit: pad-to-square pixels, the system
prompt reaching collated ids, prompt formats for template-less processors, re-batching of per-sample
tensors."""
from __future__ import annotations

import pytest

from evalsuite.errors import UserError
from evalsuite.models.inputs import InputConfig, ModelInputs

VICUNA = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
          "helpful, detailed, and polite answers to the user's questions.")
# (value - CLIP mean) / CLIP std, per channel
BORDER = (-0.011254, -0.011196, -0.001333)   # the pad colour int(mean * 255) = (122, 116, 104), over 255
RED = (1.930336, -1.752097, -1.480220)       # (255, 0, 0)


@pytest.fixture(scope="module")
def processor(tiny_vlm_dir):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_vlm_dir, local_files_only=True)


def _red(w=32, h=16):
    from PIL import Image

    return Image.new("RGB", (w, h), (255, 0, 0))


def test_pad_to_square_border_is_the_image_mean_colour(processor):
    """A 32x16 red image, pad: a 32x32 canvas of (122, 116, 104) (CLIP's mean * 255, truncated as LLaVA-1.5's
    expand2square does) with the image in rows 8-23; the 32 px kit processor then leaves it unscaled, so
    pixel (0, 0) is the normalised border colour and row 16 is red. crop: the processor resizes the short
    side to 32 (64x32) and centre-crops, so every pixel is red."""
    pad = ModelInputs(processor, InputConfig(image_aspect="pad"))
    square = pad.prepare_image(_red())
    assert square.size == (32, 32)
    assert square.getpixel((0, 0)) == square.getpixel((31, 7)) == (122, 116, 104)
    assert square.getpixel((0, 8)) == square.getpixel((31, 23)) == (255, 0, 0)
    assert square.getpixel((5, 24)) == (122, 116, 104)

    px = pad.encode([pad.prompt("what?")], [_red()])["pixel_values"][0]
    assert px[:, 0, 0].tolist() == pytest.approx(BORDER, abs=2e-3)
    assert px[:, 16, 5].tolist() == pytest.approx(RED, abs=2e-3)
    crop = ModelInputs(processor, InputConfig())
    px = crop.encode([crop.prompt("what?")], [_red()])["pixel_values"][0]
    assert px[:, 0, 0].tolist() == pytest.approx(RED, abs=2e-3)


def test_dpo_collator_pads_images_and_keeps_the_system_prompt(processor):
    """The DPO batch: pixels padded as above, and every row holds the system prompt's tokens right before
    "USER :" (the kit's word-level vocabulary makes words outside the synthetic world <unk>, so an
    in-vocabulary prompt is checked word for word too)."""
    from training.trainers.collate import PreferenceCollator

    col = PreferenceCollator(processor, max_prompt_length=100, inputs=InputConfig(system_prompt=VICUNA,
                                                                                    image_aspect="pad"))
    batch = col([{"image_bytes": _png(_red()), "prompt": "describe the image.", "chosen": "a dog.",
                  "rejected": "a cat."}])
    assert batch["pixel_values"].shape[0] == 2  # chosen and rejected rows
    assert batch["pixel_values"][1, :, 0, 0].tolist() == pytest.approx(BORDER, abs=2e-3)
    sys_ids = processor.tokenizer(VICUNA, add_special_tokens=False)["input_ids"]
    user = processor.tokenizer.convert_tokens_to_ids("user")
    for row in batch["input_ids"].tolist():
        start = _find(row, sys_ids)
        assert start == 0 and row[len(sys_ids)] == user
    words = "please describe the image in detail ."
    col = PreferenceCollator(processor, max_prompt_length=100, inputs=InputConfig(system_prompt=words))
    row = col([{"image_bytes": _png(_red()), "prompt": "q?", "chosen": "a", "rejected": "b"}])["input_ids"][0]
    assert processor.tokenizer.convert_ids_to_tokens(row[:9].tolist()) == words.split() + ["user", ":"]


def test_kit_template_renders_the_system_prompt_as_vicuna_v1(processor):
    """llava-1.5-hf's template renders a system message as its text + " " (no role name): with the
    released CSR system prompt that is LLaVA's Vicuna v1 conversation, "SYSTEM USER: <image>\\nQ ASSISTANT:"."""
    inputs = ModelInputs(processor, InputConfig(system_prompt=VICUNA))
    assert inputs.prompt("Describe the image.") == VICUNA + " USER: <image>\nDescribe the image. ASSISTANT:"
    assert ModelInputs(processor).prompt("Q?") == "USER: <image>\nQ? ASSISTANT:"


def test_the_csr_preset_sets_the_released_system_prompt_and_pad(repo_root):
    """CSR: Vicuna v1's system prompt; DPO pads (run_train.sh), the sampler crops (sample.py). VL-RLHF's LLaVA
    collators call the HF image processor on the raw image (models/Llava/__init__.py): crop."""
    import yaml

    csr = yaml.safe_load((repo_root / "configs" / "csr.yaml").read_text())
    assert (csr["inputs"]["system_prompt"], csr["train"]["image_aspect"], csr["tree"]["image_aspect"]) == (VICUNA, "pad", "crop")
    dpo = yaml.safe_load((repo_root / "configs" / "train" / "llava15_7b_dpo.yaml").read_text())
    assert dpo["inputs"]["image_aspect"] == "crop"


def test_no_chat_template_is_an_error_unless_a_file_is_given(processor, tmp_path):
    import copy

    from transformers import LlavaProcessor

    tok = copy.deepcopy(processor.tokenizer)
    tok.chat_template = None
    bare = LlavaProcessor(image_processor=processor.image_processor, tokenizer=tok,
                          patch_size=16, vision_feature_select_strategy="default", num_additional_image_tokens=1)
    with pytest.raises(UserError, match="--chat-template FILE"):
        ModelInputs(bare)
    f = tmp_path / "t.jinja"
    f.write_text("{% for m in messages if m['role'] == 'user' %}Q: <image> {{ m['content'][-1]['text'] }}"
                 "{% endfor %} A:")  # drops system turns
    inputs = ModelInputs(bare, InputConfig(chat_template=str(f)))
    assert inputs.prompt("why?") == "Q: <image> why? A:" and inputs.prompt_format == "chat_template_file"
    with pytest.raises(UserError, match="does not render a system message"):
        ModelInputs(bare, InputConfig(chat_template=str(f), system_prompt="Be brief."))
    with pytest.raises(UserError, match="chat_template: cannot read"):
        ModelInputs(processor, InputConfig(chat_template=str(tmp_path / "missing.jinja")))
    with pytest.raises(UserError, match="image_aspect"):
        InputConfig(image_aspect="stretch")


@pytest.fixture(scope="module")
def paligemma_dir(tmp_path_factory):
    from evalsuite.kit.families import build_tiny_family

    return build_tiny_family("paligemma", tmp_path_factory.mktemp("pg") / "pg")


def test_paligemma_gets_its_prefix_format(paligemma_dir):
    """PaliGemma ships no chat template: the prompt is "<image>" + question and the processor makes it
    image tokens, <bos>, the question, "\\n" (a prefix with token_type_ids 0; answers are the suffix, 1)."""
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(paligemma_dir)
    inputs = ModelInputs(proc)
    assert inputs.prompt_format == "paligemma" and inputs.prompt("what is this?") == "<image>what is this?"
    enc = inputs.encode([inputs.prompt("what is this?")], [_red()])
    toks = proc.tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    assert toks == ["<image>"] * 4 + ["<bos>", "what", "is", "this", "?"] and "labels" not in enc
    assert enc["token_type_ids"].tolist() == [[0] * 9] and inputs.response_fill("token_type_ids") == 1
    assert inputs.completion("what is this?", "a dog") == ("<image>what is this?", "a dog")
    with pytest.raises(UserError, match="no system prompt"):  # refused when the checkpoint loads
        ModelInputs(proc, InputConfig(system_prompt="Be brief."))


def test_paligemma_loglikelihood_scores_the_continuation_as_the_suffix(paligemma_dir):
    """lmms-eval log-likelihood on PaliGemma: the continuation follows the encoded prefix as its suffix
    (token_type_ids 1), so its summed log-prob equals the one read off transformers' own
    `processor(text=prefix, suffix=continuation)` encoding (which also appends EOS, not scored here)."""
    import torch

    from evalsuite.models.loglik import loglikelihood
    from evalsuite.models.vlm import load_vlm
    from evalsuite.types import GenRequest

    vlm = load_vlm(paligemma_dir, device="cpu")
    image = _red()
    (logp, _), = loglikelihood(vlm, [(GenRequest("k", image, "what is this?"), "a red car")])
    enc = vlm.processor(images=[image], text=["<image>what is this?"], suffix=["a red car"], return_tensors="pt")
    labels = enc.pop("labels")[0]
    with torch.no_grad():
        lp = vlm.model(**enc).logits[0].float().log_softmax(-1)
    cont = [i for i in range(1, len(labels)) if labels[i] != -100][:3]  # "a red car" (EOS not scored)
    want = sum(float(lp[i - 1, enc["input_ids"][0, i]]) for i in cont)
    assert logp == pytest.approx(want, abs=1e-4)


def test_merge_tensors_zero_pads_then_stacks():
    """(1, 2, 3) ones and (1, 3, 2) twos -> (2, 3, 3): each zero-padded at the end of dims 1 and 2."""
    import torch

    from evalsuite.models.inputs import batch_rows, merge_tensors

    out = merge_tensors([torch.ones(1, 2, 3), torch.full((1, 3, 2), 2.0)])
    assert out.shape == (2, 3, 3)
    assert out[0].sum() == 6 and out[0, 2].sum() == 0 and out[1].sum() == 12 and out[1, :, 2].sum() == 0
    b = batch_rows([[5, 6, 7], [8]], [{"token_type_ids": [0, 0]}, {}], pad_id=0, fill={"token_type_ids": 1})
    assert b["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]
    assert b["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert b["token_type_ids"].tolist() == [[0, 0, 1], [0, 0, 1]]


def _png(image) -> bytes:
    import io

    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def _find(row: list[int], sub: list[int]) -> int:
    return next((i for i in range(len(row) - len(sub) + 1) if row[i:i + len(sub)] == sub), -1)
