"""Batch builders for vision-language SFT and preference data, with evalsuite's own truncation.

Prompts, images and encoding go through `evalsuite.models.inputs` (the same path evaluation and CSR
use): the chat template (or a `chat_template` file, or the family's documented format), the
configured system prompt, `image_aspect`, one image list per sample, and every tensor the processor
returns (image sizes/grids, pixel masks, type ids) carried into the batch row by row. A completion
is the rendering of the full conversation minus the rendered prompt, so it carries whatever
end-of-turn the template emits (EOS is appended if it emits none), less the whitespace after the turn
(llava-1.5-hf: "ASSISTANT: {a} " trains " {a}" + EOS, as LLaVA's v1 and VL-RLHF do); its ids are the
ones it gets tokenized after the prompt text (`ModelInputs.completion_ids`).

Truncation counts text tokens only (image blocks — placeholders with their special markers — are
never cut), per `truncation`:
  vlrlhf     (default) TRL 0.8.1 as VL-RLHF runs it (`truncate_pair`): only when prompt + the longer
             completion exceed `max_length` is the prompt cut to its last `max_prompt_length` text
             tokens (and a leading BOS), and then, if still too long, both completions to
             `max_length - max_prompt_length`; `max_target_length` is unused (decoder-only). SFT keeps
             the first `max_length` text tokens of the conversation.
  per_field  every field has its own cap: the prompt always keeps its last `max_prompt_length` text
             tokens, a completion / SFT answer its first `max_target_length` tokens, and a completion
             is then cut so prompt + completion fit `max_length`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalsuite.models.inputs import end_of_turn
from training.losses import diff_token_masks, replaced_token_masks


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


def keep_prompt_end(ids: list[int], protected: set[int], limit: int) -> list[int]:
    """Positions kept of a prompt: the protected ones (image block, leading BOS) and the last `limit` others."""
    text_pos = [i for i in range(len(ids)) if i not in protected]
    keep = protected | set(text_pos[max(0, len(text_pos) - limit):])
    return sorted(keep)


@dataclass
class _Row:
    """One encoded prompt: token ids and its sequence-aligned processor values (token_type_ids, ...)."""

    ids: list[int]
    seq: dict[str, list[int]]

    def take(self, positions: list[int]) -> "_Row":
        return _Row([self.ids[i] for i in positions], {k: [v[i] for i in positions] for k, v in self.seq.items()})


@dataclass
class _Tok:
    processor: Any
    inputs_config: Any = None  # evalsuite.models.inputs.InputConfig

    def __post_init__(self):
        from evalsuite.models.inputs import ModelInputs

        self.inputs = ModelInputs(self.processor, self.inputs_config, where="model_name_or_path")
        tok = self.processor.tokenizer
        self.tok = tok
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        self.eos_id = tok.eos_token_id
        self.bos_id = tok.bos_token_id
        image = getattr(self.processor, "image_token_id", None)
        self.image_id = image if image is not None else tok.convert_tokens_to_ids(self.inputs.image_token)
        self.special_ids = {i for i, t in tok.added_tokens_decoder.items() if t.special} | set(tok.all_special_ids)
        self.fill = {"token_type_ids": self.inputs.response_fill("token_type_ids")}

    def render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.inputs.render(self.inputs.with_system(messages), generation_prompt)

    def completion_text(self, question: str, answer: str, with_image: bool) -> tuple[str, str]:
        return self.inputs.completion(question, answer, with_image)

    def encode_text(self, text: str, before: str = "") -> list[int]:
        """`text`'s ids as tokenized after the rendered text `before` (ModelInputs.completion_ids)."""
        return self.inputs.completion_ids(before, text)

    def encode_prompts(self, prompts: list[str], images: list) -> tuple[list[_Row], dict[str, Any]]:
        """One `_Row` per prompt, and the image tensors of the rows with an image (in row order)."""
        from evalsuite.models.inputs import sequence_keys

        out: list[_Row] = [_Row([], {}) for _ in prompts]
        image_data: dict[str, Any] = {}
        for with_image in (True, False):
            rows = [i for i, im in enumerate(images) if (im is not None) == with_image]
            if not rows:
                continue
            enc = self.inputs.encode([prompts[i] for i in rows], [images[i] for i in rows] if with_image else None)
            seq = sequence_keys(enc)
            for j, row in enumerate(rows):
                mask = enc["attention_mask"][j].bool()
                out[row] = _Row(enc["input_ids"][j][mask].tolist(), {k: enc[k][j][mask].tolist() for k in seq})
            if with_image:
                image_data = {k: v for k, v in enc.items() if k not in ("input_ids", "attention_mask", *seq)}
        return out, image_data

    def protected(self, ids: list[int]) -> set[int]:
        """Positions truncation never cuts: the image blocks and a leading BOS."""
        bos = {0} if ids and self.bos_id is not None and ids[0] == self.bos_id else set()
        return self.image_positions(ids) | bos

    def image_positions(self, ids: list[int]) -> set[int]:
        """Every run of special tokens that holds an image token: the image placeholders with their
        markers (Qwen's vision_start/end, Idefics3's row/col tags, Gemma3's start/end_of_image,
        PaliGemma's <bos> after the image). Not text, never counted nor cut."""
        keep: set[int] = set()
        i = 0
        while i < len(ids):
            if ids[i] not in self.special_ids:
                i += 1
                continue
            j = i
            while j < len(ids) and ids[j] in self.special_ids:
                j += 1
            if self.image_id in ids[i:j]:
                keep.update(range(i, j))
            i = j
        return keep

    def text_len(self, ids: list[int]) -> int:
        return len(ids) - len(self.image_positions(ids))

    def cut_prompt(self, row: _Row, limit: int) -> _Row:
        """`row` keeping its protected positions and its last `limit` text tokens."""
        return row.take(keep_prompt_end(row.ids, self.protected(row.ids), limit))


def truncate_pair(prompt: _Row, answers: list[list[int]], t: _Tok, max_length: int, max_prompt_length: int,
                  max_target_length: int, mode: str = "vlrlhf") -> tuple[_Row, list[list[int]]]:
    """(prompt, answers) cut to the length limits (module docstring); answers already end with EOS."""
    if mode == "per_field":
        prompt = t.cut_prompt(prompt, max_prompt_length)
        room = max(1, max_length - t.text_len(prompt.ids))
        return prompt, [a[: min(max_target_length, room)] for a in answers]
    longer = max(len(a) for a in answers)  # TRL 0.8.1 tokenize_row: measured once, before any cut
    if t.text_len(prompt.ids) + longer > max_length:
        prompt = t.cut_prompt(prompt, max_prompt_length)
    if t.text_len(prompt.ids) + longer > max_length:
        answers = [a[: max_length - max_prompt_length] for a in answers]
    return prompt, answers


def _pad_right(rows: list[list[int]], value: int):
    import torch

    width = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (width - len(r)) for r in rows], dtype=torch.long)


def _model_batch(t: _Tok, prompts: list[_Row], rows: list[list[int]], image_data: dict[str, Any]) -> dict:
    """input_ids / attention_mask / sequence-aligned ids (prompt values, then the response fill), right-padded,
    plus the image tensors: the batch the model's forward receives."""
    from evalsuite.models.inputs import batch_rows

    batch = batch_rows(rows, [p.seq for p in prompts], t.pad_id, t.fill, side="right")
    batch.update(image_data)
    return batch


@dataclass
class PreferenceCollator:
    """Examples {image, image_bytes, prompt, chosen, rejected[, ref_*_logps]} -> a 2B-row batch.

    Rows are [chosen_0..chosen_{B-1}, rejected_0..rejected_{B-1}] (TRL's layout); every per-sample
    tensor of the processor (pixels, image sizes/grids, type ids) follows the rows. `logp_mask` marks
    the completion tokens whose log-probs enter the sequence log-prob: all of them, or for DDPO only
    those where chosen and rejected differ. `inputs`: system prompt, chat template file, image_aspect.
    """

    processor: Any
    max_length: int = 512
    max_prompt_length: int = 128
    max_target_length: int = 128
    diff_mask: str | None = None  # ddpo: "replaced" (VL-RLHF) | "changed" (training/losses.py)
    truncation: str = "vlrlhf"
    inputs: Any = None  # evalsuite.models.inputs.InputConfig

    def __post_init__(self):
        self._t = _Tok(self.processor, self.inputs)

    def _completion(self, ids: list[int]) -> list[int]:
        t = self._t
        return ids if ids and ids[-1] == t.eos_id else ids + [t.eos_id]

    def _masks(self, pairs: list[tuple[list[int], list[int], list[int]]]) -> list[tuple[list[int], list[int]]]:
        """Per pair, the 0/1 masks of the chosen and rejected tokens entering the sequence log-probs."""
        if self.diff_mask == "replaced":
            return replaced_token_masks([(len(p), c, r) for p, c, r in pairs])
        if self.diff_mask == "changed":
            return [diff_token_masks(c, r) for _, c, r in pairs]
        return [([1] * len(c), [1] * len(r)) for _, c, r in pairs]

    def __call__(self, examples: list[dict]) -> dict:
        import torch

        from evalsuite.models.inputs import merge_tensors

        t = self._t
        images = [load_example_image(ex) for ex in examples]
        prompts, chosen, rejected = [], [], []
        for ex, im in zip(examples, images):
            prompt, c_text = t.completion_text(ex["prompt"], ex["chosen"], im is not None)
            _, r_text = t.completion_text(ex["prompt"], ex["rejected"], im is not None)
            prompts.append(prompt)
            chosen.append(c_text)
            rejected.append(r_text)
        encoded, image_data = t.encode_prompts(prompts, images)
        rows, comp_masks, logp_masks = [], [], []
        pairs, kept = [], []
        for p, text, c, r in zip(encoded, prompts, chosen, rejected):
            answers = [self._completion(t.encode_text(c, text)), self._completion(t.encode_text(r, text))]
            p, (c_ids, r_ids) = truncate_pair(p, answers, t, self.max_length, self.max_prompt_length,
                                              self.max_target_length, self.truncation)
            kept.append(p)
            pairs.append((p.ids, c_ids, r_ids))
        masks = self._masks(pairs)
        for side in (0, 1):  # chosen rows, then rejected rows
            for (p, c, r), mask in zip(pairs, masks):
                comp = (c, r)[side]
                rows.append(p + comp)
                comp_masks.append([0] * len(p) + [1] * len(comp))
                logp_masks.append([0] * len(p) + mask[side])
        doubled = {k: merge_tensors([v, v]) for k, v in image_data.items()}  # sample-major: rows repeat
        batch = _model_batch(t, kept + kept, rows, doubled)
        batch["completion_mask"] = _pad_right(comp_masks, 0)
        batch["logp_mask"] = _pad_right(logp_masks, 0)
        if "ref_chosen_logps" in examples[0]:
            batch["ref_chosen_logps"] = torch.tensor([ex["ref_chosen_logps"] for ex in examples])
            batch["ref_rejected_logps"] = torch.tensor([ex["ref_rejected_logps"] for ex in examples])
        return batch


@dataclass
class SFTCollator:
    """Examples {image, image_bytes, messages} -> input_ids / attention_mask / labels (+ image tensors).

    Only assistant turns are labelled; the whole sequence keeps its first `max_length` text tokens
    (image tokens are in the first turn and always kept). With `truncation: per_field` the first
    prompt also keeps only its last `max_prompt_length` text tokens and each answer its first
    `max_target_length` tokens.
    """

    processor: Any
    max_length: int = 512
    max_prompt_length: int = 128
    max_target_length: int = 128
    label_pad_token_id: int = -100
    truncation: str = "vlrlhf"  # per_field: prompt and answers capped too (module docstring)
    inputs: Any = None  # evalsuite.models.inputs.InputConfig
    eos_every_turn: bool = True  # False: EOS after the last answer only (VL-RLHF's SFT tokenize_row)

    def __post_init__(self):
        self._t = _Tok(self.processor, self.inputs)

    def _segments(self, messages: list[dict], with_image: bool) -> list[tuple[str, bool]]:
        """(text, is_assistant) pieces whose concatenation is the rendered conversation (less the whitespace
        after its last turn): an answer piece ends at its text, the separator after it opens the next piece."""
        t = self._t
        if t.inputs.plain and len(messages) == 2:  # one prefix, one suffix (PaliGemma, BLIP)
            prompt, answer = t.completion_text(messages[0]["content"], messages[1]["content"], with_image)
            return [(prompt, False), (answer, True)]
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
            answer, tail = end_of_turn(full[len(prompt):])  # the turn separator is no part of the answer
            pieces += [(prompt[len(done):], False), (answer, True)]
            done = full[: len(full) - len(tail)]
        return pieces

    def __call__(self, examples: list[dict]) -> dict:
        t = self._t
        images = [load_example_image(ex) for ex in examples]
        segs = [self._segments(ex["messages"], im is not None) for ex, im in zip(examples, images)]
        encoded, image_data = t.encode_prompts([s[0][0] for s in segs], images)
        prompts, rows, labels = [], [], []
        for first, pieces in zip(encoded, segs):
            per_field = self.truncation == "per_field"
            first = t.cut_prompt(first, self.max_prompt_length) if per_field else first
            ids = list(first.ids)
            lab = [self.label_pad_token_id] * len(ids)
            rendered = pieces[0][0]
            last = max(k for k, (_, is_answer) in enumerate(pieces) if is_answer)
            for k, (text, is_answer) in enumerate(pieces[1:], 1):
                piece = t.encode_text(text, rendered)
                rendered += text
                ends = is_answer and (self.eos_every_turn or k == last)
                if ends and (not piece or piece[-1] != t.eos_id):
                    piece = piece + [t.eos_id]
                if is_answer:
                    piece = piece[: self.max_target_length] if per_field else piece
                ids += piece
                lab += piece if is_answer else [self.label_pad_token_id] * len(piece)
            keep = _first_text_tokens(ids, t.image_positions(ids), self.max_length)
            prompts.append(first)
            rows.append(ids[:keep])
            labels.append(lab[:keep])
        batch = _model_batch(t, prompts, rows, image_data)
        batch["labels"] = _pad_right(labels, self.label_pad_token_id)
        return batch


def _first_text_tokens(ids: list[int], protected: set[int], limit: int) -> int:
    """Length of the longest prefix of `ids` holding at most `limit` text (not `protected`) tokens."""
    n = 0
    for i in range(len(ids)):
        if i not in protected:
            n += 1
            if n > limit:
                return i
    return len(ids)
