"""The DPO / SFT completion with llava-1.5-hf's chat template and a SentencePiece-style tokenizer, by token id.

llava-1.5-hf's template ends every turn with a space: the prompt renders "USER: <image>\\nQ ASSISTANT:" and
prompt + answer "USER: <image>\\nQ ASSISTANT: a dog ". Tokenized on its own, the rest " a dog " is
["▁a", "▁dog", "▁"]: a space token the model would be trained to emit before EOS. LLaVA's v1 conversation
(CSR's DPO) trains "ASSISTANT: a dog</s>" and VL-RLHF (TRL 0.8.1's tokenize_row) tokenizes prompt + answer
together, splits at the prompt's length and appends EOS, so the completion is ["▁a", "▁dog", "</s>"].

The tokenizer is transformers' own LlamaTokenizer class (Metaspace "▁" word starts, BPE) over a vocabulary
trained here on a few sentences, so ids are small and the test needs no download; the kit's template
(evalsuite/kit/tiny.py) renders as llava-1.5-hf's does, checked string for string below.
"""
from __future__ import annotations

import pytest

from evalsuite.kit.tiny import CHAT_TEMPLATE
from evalsuite.models.inputs import InputConfig, ModelInputs, end_of_turn

CORPUS = ["USER: <image>\nwhat is in the image? ASSISTANT: a dog on the grass.",
          "a cat . a red cup on the left . describe the image ."]


def _llama_tokenizer(legacy: bool):
    """LlamaTokenizer over a BPE vocabulary of word pieces (`legacy=True`: a "▁" is put before every text
    tokenized, as old Llama conversions do; False: only at the start of the input)."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaTokenizer

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    bpe.train_from_iterator(CORPUS * 5, trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                            special_tokens=["<unk>", "<s>", "</s>"]))
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tok = LlamaTokenizer(vocab=model["vocab"], merges=merges, legacy=legacy)
    tok.add_special_tokens({"pad_token": "<pad>"})
    tok.add_tokens(["<image>"], special_tokens=True)
    return tok


@pytest.fixture(scope="module", params=[False, True], ids=["first", "legacy"])
def processor(request, tiny_vlm_dir):
    from transformers import AutoImageProcessor, LlavaProcessor

    image_processor = AutoImageProcessor.from_pretrained(tiny_vlm_dir, local_files_only=True)
    return LlavaProcessor(image_processor=image_processor, tokenizer=_llama_tokenizer(request.param),
                          chat_template=CHAT_TEMPLATE, patch_size=16, vision_feature_select_strategy="default",
                          num_additional_image_tokens=1)


def _red():
    from PIL import Image

    return Image.new("RGB", (32, 32), (255, 0, 0))


def _tokens(processor, ids):
    return processor.tokenizer.convert_ids_to_tokens(list(ids))


def test_kit_template_renders_as_llava_15_hf(processor):
    """Every turn + " ", a system turn without a role name, the generation prompt "ASSISTANT:", no EOS."""
    inputs = ModelInputs(processor, InputConfig(system_prompt="Be brief."))
    assert inputs.prompt("what is in the image?") == "Be brief. USER: <image>\nwhat is in the image? ASSISTANT:"
    turns = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Q"}]},
             {"role": "assistant", "content": [{"type": "text", "text": "A."}]},
             {"role": "user", "content": [{"type": "text", "text": "Q2"}]}]
    assert ModelInputs(processor).render(turns, True) == "USER: <image>\nQ ASSISTANT: A. USER: Q2 ASSISTANT:"
    assert ModelInputs(processor).render(turns[:2], False) == "USER: <image>\nQ ASSISTANT: A. "


def test_completion_text_ends_at_the_answer(processor):
    inputs = ModelInputs(processor)
    assert inputs.completion("what is in the image?", "a dog") == (
        "USER: <image>\nwhat is in the image? ASSISTANT:", " a dog")
    assert end_of_turn(" a dog<|im_end|>\n") == (" a dog<|im_end|>", "\n")


def test_dpo_completion_ids_are_the_answer_then_eos(processor):
    """Chosen " a dog" -> ["▁a", "▁dog", "</s>"] and rejected " a cat" -> ["▁a", "▁cat", "</s>"], no "▁"
    before EOS; prompt ids + completion ids are the ids of prompt + answer tokenized together (TRL 0.8.1's
    split), for both tokenizer conventions."""
    from training.trainers.collate import PreferenceCollator

    tok = processor.tokenizer
    batch = PreferenceCollator(processor)([{"image_bytes": None, "image": None, "prompt": "what is in the image?",
                                           "chosen": "a dog", "rejected": "a cat"}])
    prompt = "USER: what is in the image? ASSISTANT:"   # no image: the text rows only
    for row, comp, answer in zip(batch["input_ids"].tolist(), batch["completion_mask"].tolist(), ("dog", "cat")):
        ids = [i for i, m in zip(row, comp) if m]
        assert _tokens(processor, ids) == ["▁a", f"▁{answer}", "</s>"]
        whole = tok(prompt + f" a {answer}", add_special_tokens=False)["input_ids"]
        head = tok(prompt, add_special_tokens=False)["input_ids"]
        assert ids[:-1] == whole[len(head):]


def test_dpo_completion_with_an_image_row(processor):
    """The same with an image: the prompt row holds the expanded image tokens, the completion is unchanged."""
    import io

    from training.trainers.collate import PreferenceCollator

    buf = io.BytesIO()
    _red().save(buf, format="PNG")
    batch = PreferenceCollator(processor)([{"image_bytes": buf.getvalue(), "prompt": "what is in the image?",
                                           "chosen": "a dog on the grass.", "rejected": "a cat"}])
    row, comp = batch["input_ids"][0].tolist(), batch["completion_mask"][0].tolist()
    assert _tokens(processor, [i for i, m in zip(row, comp) if m])[-2:] == ["▁grass.", "</s>"]
    assert processor.tokenizer.convert_tokens_to_ids("<image>") in row


def test_sft_answer_labels_end_with_eos_not_a_space(processor):
    """Two turns: each answer's labels are its words + EOS; the space after an answer opens the next user turn."""
    from training.trainers.collate import SFTCollator

    ex = {"image": None, "messages": [{"role": "user", "content": "what is in the image?"},
                                      {"role": "assistant", "content": "a dog"},
                                      {"role": "user", "content": "describe the image ."},
                                      {"role": "assistant", "content": "a red cup"}]}
    batch = SFTCollator(processor)([ex])
    labels = [i for i in batch["labels"][0].tolist() if i != -100]
    assert _tokens(processor, labels) == ["▁a", "▁dog", "</s>", "▁a", "▁red", "▁cup", "</s>"]
