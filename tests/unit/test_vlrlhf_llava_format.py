"""`chat_format: vlrlhf_llava` (configs/train/llava15_7b_dpo.yaml) against strings worked out by hand from
VL-RLHF's LLaVA processor (src/vlrlhf/models/Llava/__init__.py, e9737dc).

Its chat template: user_begin "USER: ", user_end "", assistant_begin "ASSISTANT: ", assistant_end "",
image placeholder "<image>\\n" put before the first prompt; no system turn. `process_batch_conv` joins
begin + value + end per turn, and an empty assistant value gets no end, so:
  * DPO (VLDPOTrainer.tokenize_row): prompt "USER: <image>\\n{q}" + "ASSISTANT: " (no separator before
    "ASSISTANT:"), then TRL 0.8.1's tokenize_row: BOS + tokens of prompt + answer, split where the
    prompt's own tokens stop matching (one back when the last prompt token merged), EOS appended;
  * SFT (VLSFTTrainer.tokenize_row): "USER: <image>\\n{q1}ASSISTANT: {a1}USER: {q2}ASSISTANT: {a2}" and
    one EOS, after the last answer only.
The tokenizer is test_completion_tokens.py's SentencePiece-style LlamaTokenizer (both conventions)."""
from __future__ import annotations

import pytest

from evalsuite.models.inputs import InputConfig, ModelInputs
from tests.unit.test_completion_tokens import _tokens, processor  # noqa: F401 - the fixture
from training.config import VLRLHF_LLAVA_TEMPLATE

VLRLHF = InputConfig(chat_template=str(VLRLHF_LLAVA_TEMPLATE))


def test_prompt_strings_by_hand(processor):  # noqa: F811
    inputs = ModelInputs(processor, VLRLHF)
    assert inputs.prompt("what is in the image?") == "USER: <image>\nwhat is in the image?ASSISTANT:"
    prompt, completion = inputs.completion("what is in the image?", "a dog")
    assert prompt + completion == "USER: <image>\nwhat is in the image?" + "ASSISTANT: " + "a dog"
    turns = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Q1"}]},
             {"role": "assistant", "content": [{"type": "text", "text": "A1"}]},
             {"role": "user", "content": [{"type": "text", "text": "Q2"}]},
             {"role": "assistant", "content": [{"type": "text", "text": "A2"}]}]
    assert inputs.render(turns, False) == "USER: <image>\nQ1ASSISTANT: A1USER: Q2ASSISTANT: A2"
    assert ModelInputs(processor).prompt("Q") == "USER: <image>\nQ ASSISTANT:"  # ours: llava-1.5-hf's template


def test_dpo_row_is_trl_081_split_of_the_vlrlhf_prompt(processor):  # noqa: F811
    from training.trainers.collate import PreferenceCollator

    tok = processor.tokenizer
    batch = PreferenceCollator(processor, inputs=VLRLHF)([{"image_bytes": None, "image": None,
                                                          "prompt": "what is in the image?",
                                                          "chosen": "a dog", "rejected": "a cat"}])
    raw = "USER: what is in the image?" + "ASSISTANT: "  # no image on this row: no placeholder
    for row, comp, answer in zip(batch["input_ids"].tolist(), batch["completion_mask"].tolist(), ("a dog", "a cat")):
        whole = tok(raw + answer, add_special_tokens=False)["input_ids"]
        head = tok(raw, add_special_tokens=False)["input_ids"]
        start = len(head) - (head != whole[:len(head)])
        assert [i for i, m in zip(row, comp) if m] == whole[start:] + [tok.eos_token_id]
        # TRL puts BOS first; ours comes from the tokenizer (llava-hf's adds it; this test tokenizer does not)
        bos = [tok.bos_token_id] if tok("x")["input_ids"][0] == tok.bos_token_id else []
        assert [i for i, m in zip(row, comp) if not m and i != tok.pad_token_id] == bos + whole[:start]


def test_sft_has_one_eos_after_the_last_answer(processor):  # noqa: F811
    from training.trainers.collate import SFTCollator

    tok = processor.tokenizer
    ex = {"image": None, "messages": [{"role": "user", "content": "what is in the image?"},
                                      {"role": "assistant", "content": "a dog"},
                                      {"role": "user", "content": "describe the image ."},
                                      {"role": "assistant", "content": "a red cup"}]}
    batch = SFTCollator(processor, inputs=VLRLHF, eos_every_turn=False)([ex])
    ids = batch["input_ids"][0].tolist()
    raw = "USER: what is in the image?ASSISTANT: a dogUSER: describe the image .ASSISTANT: a red cup"
    assert tok.decode(ids, skip_special_tokens=True) == tok.decode(tok(raw)["input_ids"], skip_special_tokens=True)
    assert ids.count(tok.eos_token_id) == 1 and ids[-1] == tok.eos_token_id
    labels = [i for i in batch["labels"][0].tolist() if i != -100]
    assert labels[-1] == tok.eos_token_id and tok.eos_token_id not in labels[:-1]
    assert tok.decode(labels, skip_special_tokens=True).split() == ["a", "dog", "a", "red", "cup"]


def test_the_vlrlhf_preset_selects_it(repo_root, tmp_path):
    import yaml

    from evalsuite.errors import UserError
    from training.config import build_train_config

    preset = yaml.safe_load((repo_root / "configs" / "train" / "llava15_7b_dpo.yaml").read_text())
    assert (preset["chat_format"], preset["inputs"]["image_aspect"]) == ("vlrlhf_llava", "crop")
    base = {"method": "dpo", "output_dir": str(tmp_path), "chat_format": "vlrlhf_llava"}
    cfg = build_train_config(base, "t", portable=True)
    assert cfg.input_config().chat_template == str(VLRLHF_LLAVA_TEMPLATE)
    with pytest.raises(UserError, match="inputs.system_prompt: not with chat_format vlrlhf_llava"):
        build_train_config({**base, "inputs": {"system_prompt": "Be brief."}}, "t", portable=True)


def test_the_vlrlhf_preset_batch_crops_and_uses_the_vlrlhf_prompt(repo_root, tiny_vlm_dir, tmp_path):
    """The preset's DPO batch on the tiny processor: the raw 32x16 red image through the image processor
    (resize to 64x32, centre crop to 32x32: all red, as VL-RLHF's LlavaDPODataCollatorWithPadding gives
    it), and the prompt "USER: <image>\\n{q}ASSISTANT:"."""
    import io

    import yaml
    from PIL import Image
    from transformers import AutoProcessor

    from training.config import build_train_config
    from training.trainers.collate import PreferenceCollator

    preset = yaml.safe_load((repo_root / "configs" / "train" / "llava15_7b_dpo.yaml").read_text())
    cfg = build_train_config({**preset, "output_dir": str(tmp_path), "use_flash_attention_2": False, "bf16": False,
                              "tf32": False, "report_to": "none"}, "preset", portable=True)
    tiny = AutoProcessor.from_pretrained(tiny_vlm_dir, local_files_only=True)
    inputs = cfg.input_config()
    assert ModelInputs(tiny, inputs).prompt("describe the image.") == "USER: <image>\ndescribe the image.ASSISTANT:"
    buf = io.BytesIO()
    Image.new("RGB", (32, 16), (255, 0, 0)).save(buf, format="PNG")
    batch = PreferenceCollator(tiny, inputs=inputs)([{"image_bytes": buf.getvalue(), "prompt": "q?",
                                                          "chosen": "a", "rejected": "b"}])
    red = (1.930336, -1.752097, -1.480220)  # (255, 0, 0) normalised by CLIP's mean and std
    assert batch["pixel_values"][0, :, 0, 0].tolist() == pytest.approx(red, abs=2e-3)
