"""Batch builders for vision-language SFT and preference data, with evalsuite's own truncation.

Text goes through the checkpoint's chat template (the image enters the first user turn once);
a completion is the template's rendering of the full conversation minus the rendered prompt, so it
carries whatever end-of-turn the template emits (EOS is appended if it emits none).

Truncation counts text tokens only (image placeholder tokens are never cut):
  prompt      keeps its last `max_prompt_length` text tokens (and a leading BOS);
  completion  keeps its first `max_target_length` tokens, then is cut so prompt + completion fit
              `max_length`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from training.losses import diff_token_masks


def load_example_image(example: dict):
    from evalsuite.images import open_rgb

    if example.get("image_bytes"):
        return open_rgb(example["image_bytes"], name=example.get("image") or "image_bytes")
    if example.get("image"):
        return open_rgb(example["image"])
    return None


def _user(text: str, with_image: bool) -> dict:
    content = ([{"type": "image"}] if with_image else []) + [{"type": "text", "text": text}]
    return {"role": "user", "content": content}


def _assistant(text: str) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def keep_prompt_end(ids: list[int], image_id: int, bos_id: int | None, limit: int) -> list[int]:
    """Keep image tokens, a leading BOS and the last `limit` text tokens, in order."""
    protected = {i for i, t in enumerate(ids) if t == image_id}
    if ids and bos_id is not None and ids[0] == bos_id:
        protected.add(0)
    text_pos = [i for i in range(len(ids)) if i not in protected]
    keep = protected | set(text_pos[max(0, len(text_pos) - limit):])
    return [t for i, t in enumerate(ids) if i in keep]


@dataclass
class _Tok:
    processor: Any

    def __post_init__(self):
        tok = self.processor.tokenizer
        self.tok = tok
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        self.eos_id = tok.eos_token_id
        self.bos_id = tok.bos_token_id
        self.image_id = tok.convert_tokens_to_ids(getattr(self.processor, "image_token", "<image>"))

    def render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.processor.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)

    def completion_text(self, prompt_msgs: list[dict], answer: str) -> tuple[str, str]:
        prompt = self.render(prompt_msgs, True)
        full = self.render(prompt_msgs + [_assistant(answer)], False)
        if not full.startswith(prompt):
            raise ValueError("the chat template does not render the prompt as a prefix of prompt + answer")
        return prompt, full[len(prompt):]

    def encode_text(self, text: str) -> list[int]:
        ids = self.tok(text, add_special_tokens=False)["input_ids"]
        return ids

    def encode_prompts(self, prompts: list[str], images: list) -> tuple[list[list[int]], Any]:
        """Token ids per prompt (image tokens expanded) and the pixel values of the rows with an image."""
        has = [im is not None for im in images]
        add_special = not (self.bos_id is not None and prompts and prompts[0].startswith(self.tok.bos_token or "\0"))
        out: list[list[int]] = [[] for _ in prompts]
        pixel = None
        img_rows = [i for i, h in enumerate(has) if h]
        txt_rows = [i for i, h in enumerate(has) if not h]
        if img_rows:
            enc = self.processor(images=[images[i] for i in img_rows], text=[prompts[i] for i in img_rows],
                                 padding=True, padding_side="left", return_tensors="pt",
                                 add_special_tokens=add_special)
            for row, ids, mask in zip(img_rows, enc["input_ids"], enc["attention_mask"]):
                out[row] = ids[mask.bool()].tolist()
            pixel = enc["pixel_values"]
        for row in txt_rows:
            out[row] = self.tok(prompts[row], add_special_tokens=add_special)["input_ids"]
        return out, pixel

    def text_len(self, ids: list[int]) -> int:
        return sum(1 for t in ids if t != self.image_id)


def _pad_right(rows: list[list[int]], value: int):
    import torch

    width = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (width - len(r)) for r in rows], dtype=torch.long)


@dataclass
class PreferenceCollator:
    """Examples {image, image_bytes, prompt, chosen, rejected[, ref_*_logps]} -> a 2B-row batch.

    Rows are [chosen_0..chosen_{B-1}, rejected_0..rejected_{B-1}] (TRL's layout). `logp_mask` marks
    the completion tokens whose log-probs enter the sequence log-prob: all of them, or for DDPO only
    those where chosen and rejected differ.
    """

    processor: Any
    max_length: int = 512
    max_prompt_length: int = 128
    max_target_length: int = 128
    diff_mask: bool = False

    def __post_init__(self):
        self._t = _Tok(self.processor)

    def _completion(self, ids: list[int], prompt_text_len: int) -> list[int]:
        t = self._t
        if not ids or ids[-1] != t.eos_id:
            ids = ids + [t.eos_id]
        room = max(1, self.max_length - prompt_text_len)
        return ids[: min(self.max_target_length, room)]

    def __call__(self, examples: list[dict]) -> dict:
        import torch

        t = self._t
        images = [load_example_image(ex) for ex in examples]
        prompts, chosen, rejected = [], [], []
        for ex, im in zip(examples, images):
            msgs = [_user(ex["prompt"], im is not None)]
            prompt, c_text = t.completion_text(msgs, ex["chosen"])
            _, r_text = t.completion_text(msgs, ex["rejected"])
            prompts.append(prompt)
            chosen.append(c_text)
            rejected.append(r_text)
        prompt_ids, pixel = t.encode_prompts(prompts, images)
        prompt_ids = [keep_prompt_end(p, t.image_id, t.bos_id, self.max_prompt_length) for p in prompt_ids]
        rows, comp_masks, logp_masks = [], [], []
        pairs = []
        for p, c, r in zip(prompt_ids, chosen, rejected):
            n = t.text_len(p)
            pairs.append((p, self._completion(t.encode_text(c), n), self._completion(t.encode_text(r), n)))
        for side in (1, 2):  # chosen rows, then rejected rows
            for p, c, r in pairs:
                comp = (c, r)[side - 1]
                if self.diff_mask:
                    mask = diff_token_masks(c, r)[side - 1]
                else:
                    mask = [1] * len(comp)
                rows.append(p + comp)
                comp_masks.append([0] * len(p) + [1] * len(comp))
                logp_masks.append([0] * len(p) + mask)
        input_ids = _pad_right(rows, t.pad_id)
        batch = {
            "input_ids": input_ids,
            "attention_mask": _pad_right([[1] * len(r) for r in rows], 0),
            "completion_mask": _pad_right(comp_masks, 0),
            "logp_mask": _pad_right(logp_masks, 0),
        }
        if pixel is not None:
            batch["pixel_values"] = torch.cat([pixel, pixel], dim=0)
        if "ref_chosen_logps" in examples[0]:
            batch["ref_chosen_logps"] = torch.tensor([ex["ref_chosen_logps"] for ex in examples])
            batch["ref_rejected_logps"] = torch.tensor([ex["ref_rejected_logps"] for ex in examples])
        return batch


@dataclass
class SFTCollator:
    """Examples {image, image_bytes, messages} -> input_ids / attention_mask / labels (+ pixel_values).

    Only assistant turns are labelled; each is cut to `max_target_length`, and the whole sequence
    keeps its first `max_length` text tokens (image tokens are in the first turn and always kept).
    """

    processor: Any
    max_length: int = 512
    max_prompt_length: int = 128
    max_target_length: int = 128
    label_pad_token_id: int = -100

    def __post_init__(self):
        self._t = _Tok(self.processor)

    def _segments(self, messages: list[dict], with_image: bool) -> list[tuple[str, bool]]:
        """(text, is_assistant) pieces whose concatenation is the rendered conversation."""
        t = self._t
        msgs = [(_user(m["content"], with_image and i == 0) if m["role"] == "user" else _assistant(m["content"]))
                for i, m in enumerate(messages)]
        pieces, done = [], ""
        for k, m in enumerate(msgs):
            if m["role"] != "assistant":
                continue
            prompt = t.render(msgs[:k], True)
            full = t.render(msgs[: k + 1], False)
            if not prompt.startswith(done) or not full.startswith(prompt):
                raise ValueError("the chat template does not render conversations prefix-consistently")
            pieces += [(prompt[len(done):], False), (full[len(prompt):], True)]
            done = full
        return pieces

    def __call__(self, examples: list[dict]) -> dict:
        t = self._t
        images = [load_example_image(ex) for ex in examples]
        segs = [self._segments(ex["messages"], im is not None) for ex, im in zip(examples, images)]
        first_ids, pixel = t.encode_prompts([s[0][0] for s in segs], images)
        rows, labels = [], []
        for first, pieces in zip(first_ids, segs):
            ids = keep_prompt_end(first, t.image_id, t.bos_id, self.max_prompt_length)
            lab = [self.label_pad_token_id] * len(ids)
            for text, is_answer in pieces[1:]:
                piece = t.encode_text(text)
                if is_answer:
                    if not piece or piece[-1] != t.eos_id:
                        piece = piece + [t.eos_id]
                    piece = piece[: self.max_target_length]
                ids += piece
                lab += piece if is_answer else [self.label_pad_token_id] * len(piece)
            keep = _first_text_tokens(ids, t.image_id, self.max_length)
            rows.append(ids[:keep])
            labels.append(lab[:keep])
        batch = {
            "input_ids": _pad_right(rows, t.pad_id),
            "attention_mask": _pad_right([[1] * len(r) for r in rows], 0),
            "labels": _pad_right(labels, self.label_pad_token_id),
        }
        if pixel is not None:
            batch["pixel_values"] = pixel
        return batch


def _first_text_tokens(ids: list[int], image_id: int, limit: int) -> int:
    """Length of the longest prefix of `ids` holding at most `limit` text (non-image) tokens."""
    n = 0
    for i, tok in enumerate(ids):
        if tok != image_id:
            n += 1
            if n > limit:
                return i
    return len(ids)
