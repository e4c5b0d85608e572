"""How prompts and images become model inputs, for every transformers-native VLM family.

One path used by evaluation (`models/vlm.py`), SFT/DPO collation (`training/trainers/collate.py`),
the CSR search and its reward pass (`training/csr/search.py`, `reward.py`):

* `InputConfig`     the three user-facing settings, the `inputs:` section of the eval, training and CSR
                    configs: `system_prompt`, `chat_template` (a Jinja file replacing the
                    checkpoint's), `image_aspect` (`crop` = what the processor does, `pad` =
                    LLaVA-1.5's pad-to-square with the image mean colour, then the processor).
* `ModelInputs`     binds a processor to an InputConfig: renders prompts (chat template with the
                    system prompt, or the family's documented prompt format where the processor has
                    no template, else a one-line error), prepares images and encodes a batch with
                    one nested image list per sample, keeping EVERY tensor the processor returns
                    (`image_sizes`, `image_grid_thw`, `pixel_attention_mask`, `token_type_ids`, ...).
* `batch_rows`      re-batches token rows built by the caller (truncated prompts + completions,
                    search contexts) with their per-sample tensors: sequence-aligned tensors follow
                    the rows, image tensors are zero-padded to a common shape and concatenated.
* `model_kwargs`    the model's own position handling (M-RoPE for Qwen-VL, 1-based PaliGemma, ...)
                    for a forward outside `generate`, through the model's generation hooks.

Architecture-specific facts live in `FAMILIES`; everything else is read from the processor.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

from evalsuite.config import opt
from evalsuite.errors import UserError

IMAGE_ASPECTS = ("crop", "pad")
# The flat keys these settings had before the `inputs:` section; a config that still uses one is told the
# new spelling in one line (evalsuite/config.py `build`, a class's MOVED) instead of "unknown key".
MOVED_TO_INPUTS = {name: f"inputs.{name}" for name in ("system_prompt", "chat_template", "image_aspect")}
# Keys the processor returns that are not model inputs: PaliGemma's back-compat `labels`
# (collators build their own) and InternVL-style bookkeeping.
NOT_MODEL_INPUTS = ("labels", "num_patches")


@dataclass(frozen=True)
class Family:
    """What the generic path cannot read from a processor.

    prompt_format: how a processor WITHOUT a chat template wants its text (the family's documented
      format), or None = no documented format (a chat template must be given).
    response_type_ids: value of `token_type_ids` on response tokens (PaliGemma: 1 = causal suffix
      after the bidirectional prefix; elsewhere responses are plain text, 0).
    """

    prompt_format: str | None = None
    response_type_ids: int = 0


# Keyed by processor class: the prompt text and sequence tensors are the processor's contract.
FAMILIES: dict[str, Family] = {
    # "<image>" + prefix; the processor inserts <bos> after the image tokens and ends the prefix with "\n"
    # (transformers' PaliGemmaProcessor, big_vision's prefix-LM format); the answer is the suffix + <eos>.
    "PaliGemmaProcessor": Family(prompt_format="paligemma", response_type_ids=1),
    # BLIP-2's model cards prompt VQA as "Question: {q} Answer:"; InstructBLIP's cards pass the instruction
    # as is. Both processors put the query-token image block before the text themselves.
    "Blip2Processor": Family(prompt_format="blip2"),
    "InstructBlipProcessor": Family(prompt_format="instructblip"),
}
# Template-less prompt formats: the text around the question ({image} = the processor's image token, for
# processors that expand a placeholder in the text), and whether the answer follows after a space.
PLAIN_FORMATS: dict[str, tuple[str, str]] = {
    "paligemma": ("{image}{question}", ""),
    "blip2": ("Question: {question} Answer:", " "),
    "instructblip": ("{question}", " "),
}


@dataclass(frozen=True)
class InputConfig:
    """The `inputs:` section of every config (`evalsuite run`, training, the CSR loop): declared here once,
    passed on as this object, recorded in runs and manifests."""

    system_prompt: str | None = opt(None, "system message put before every conversation (null = none: the "
                                          "checkpoint's chat template decides)")
    chat_template: str | None = opt(None, "a Jinja chat template file used instead of the checkpoint's", path="file")
    image_aspect: Literal["crop", "pad"] = opt(
        "crop", "crop = the processor's own resizing; pad = pad to a square with the image mean colour first "
                "(LLaVA-1.5's image_aspect_ratio=pad)")

    def __post_init__(self) -> None:  # values only: the template file is read (and checked) where it is used
        # built directly in code too (not only through evalsuite.config.build, which checks the Literal)
        if self.image_aspect not in IMAGE_ASPECTS:
            raise UserError(f"image_aspect: {self.image_aspect!r} is not one of {', '.join(IMAGE_ASPECTS)}")
        if self.system_prompt is not None and not self.system_prompt.strip():
            raise UserError("system_prompt: empty (leave it unset for the checkpoint's default)")

    def template_text(self) -> str | None:
        if not self.chat_template:
            return None
        from evalsuite.models.template import read_template_file

        return read_template_file(self.chat_template)   # missing, huge or not UTF-8: one line naming it

    def identity(self) -> dict[str, Any]:
        """The settings that change a model's answers, by content (the template file's hash, not its
        path); {} for the defaults, so results and caches of runs without them keep their keys."""
        return {k: v for k, v in self.to_dict().items() if k != "chat_template" and v != getattr(InputConfig, k, None)}

    def cache_suffix(self) -> str:
        """"" for the defaults, else a short hash of `identity()`: response caches keyed by checkpoint
        must not serve answers generated under another prompt or image preparation."""
        ident = self.identity()
        if not ident:
            return ""
        from evalsuite.identity import digest

        return "+inputs-" + digest(ident, 12)

    def to_dict(self) -> dict[str, Any]:
        """For run.json / manifests: the settings plus the template file's hash."""
        out = asdict(self)
        if self.chat_template and Path(self.chat_template).is_file():
            from evalsuite.files import sha256_file

            out["chat_template_sha256"] = sha256_file(self.chat_template)
        return out


def end_of_turn(completion: str) -> tuple[str, str]:
    """(turn, trailing whitespace) of a rendered last turn.

    llava-1.5-hf's template ends every turn with a space that separates it from the next ("ASSISTANT: a dog "),
    where LLaVA's v1 conversation ends an answer with EOS ("ASSISTANT: a dog</s>") and VL-RLHF tokenizes
    the answer text and appends EOS. The whitespace after the last turn is no part of the answer: kept, it
    becomes a stray space token between the text and EOS, trained on as if the model should emit it."""
    turn = completion.rstrip()
    return turn, completion[len(turn):]


def expand_to_square(image, fill: tuple[int, int, int]):
    """LLaVA-1.5's `expand2square`: the image centred on a square canvas of colour `fill`."""
    from PIL import Image

    w, h = image.size
    if w == h:
        return image
    side = max(w, h)
    canvas = Image.new(image.mode, (side, side), fill)
    canvas.paste(image, ((side - w) // 2, (side - h) // 2))
    return canvas


def mean_colour(image_processor) -> tuple[int, int, int]:
    """The processor's image mean as 0-255 RGB, truncated as LLaVA-1.5 does (CLIP: (122, 116, 104))."""
    mean = getattr(image_processor, "image_mean", None) or (0.5, 0.5, 0.5)
    return tuple(int(x * 255) for x in mean)


class ModelInputs:
    """A processor plus an InputConfig: prompt rendering, image preparation and batch encoding."""

    def __init__(self, processor, config: InputConfig | None = None, where: str = "checkpoint"):
        self.processor, self.config, self.where = processor, config or InputConfig(), where
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.family = FAMILIES.get(type(processor).__name__, Family())
        self._template = self.config.template_text()
        self._owner = processor if getattr(processor, "chat_template", None) else self.tokenizer
        if self._template is not None:
            self.prompt_format = "chat_template_file"
        elif getattr(self._owner, "chat_template", None):
            self.prompt_format = "chat_template"
        elif self.family.prompt_format:
            self.prompt_format = self.family.prompt_format
        else:
            raise UserError(f"{where}: {type(processor).__name__} has no chat template and no documented prompt "
                            "format; pass --chat-template FILE (inputs.chat_template in a config)")
        self._system_as_string = False
        if self.config.system_prompt:
            self._check_system_prompt()

    # ------------------------------------------------------------ prompts
    def _messages(self, question: str, with_image: bool, answer: str | None = None) -> list[dict]:
        content = ([{"type": "image"}] if with_image else []) + [{"type": "text", "text": question}]
        msgs = [{"role": "user", "content": content}]
        if answer is not None:
            msgs.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
        return self.with_system(msgs)

    def with_system(self, messages: list[dict]) -> list[dict]:
        """`messages` with the configured system prompt as their first turn (none configured: unchanged)."""
        sp = self.config.system_prompt
        if not sp or (messages and messages[0]["role"] == "system"):
            return messages
        content = sp if self._system_as_string else [{"type": "text", "text": sp}]
        return [{"role": "system", "content": content}, *messages]

    def render(self, messages: list[dict], generation_prompt: bool) -> str:
        """The chat template (the file's if given, else the checkpoint's) applied to `messages`."""
        if self.prompt_format not in ("chat_template", "chat_template_file"):
            raise UserError(f"{self.where}: the {self.prompt_format} prompt format has one user turn and no "
                            "roles; pass --chat-template FILE for conversations")
        from evalsuite.models import template

        kw = {"chat_template": self._template} if self._template is not None else {}
        where = self.config.chat_template if self._template is not None else f"{self.where} (its chat template)"
        # untrusted code: bounded in time and size, any failure one line naming the template
        return template.render(lambda: self._owner.apply_chat_template(
            messages, add_generation_prompt=generation_prompt, tokenize=False, **kw), where)

    def prompt(self, question: str, with_image: bool = True) -> str:
        """The text handed to the processor for one question (the prompt actually sent)."""
        if self.prompt_format in PLAIN_FORMATS:
            head = PLAIN_FORMATS[self.prompt_format][0]
            return head.replace("{image}", self.image_token if with_image else "").replace("{question}", question)
        return self.render(self._messages(question, with_image), True)

    def completion(self, question: str, answer: str, with_image: bool = True) -> tuple[str, str]:
        """(prompt text, completion text): the completion is what the format renders after the prompt, without
        the whitespace a template puts after the last turn (see `end_of_turn`)."""
        prompt = self.prompt(question, with_image)
        if self.prompt_format in PLAIN_FORMATS:  # PaliGemma: the suffix; the collator ends it with EOS
            return prompt, PLAIN_FORMATS[self.prompt_format][1] + answer
        full = self.render(self._messages(question, with_image, answer), False)
        if not full.startswith(prompt):
            raise UserError(f"{self.where}: the chat template does not render the prompt as a prefix of "
                            "prompt + answer; pass --chat-template FILE")
        return prompt, end_of_turn(full[len(prompt):])[0]

    def completion_ids(self, before: str, text: str) -> list[int]:
        """Token ids of `text` as it is tokenized after the text `before` (no special tokens added).

        The ids of before + text past those of `before`, as TRL 0.8.1's DPO tokenisation (VL-RLHF's) splits a
        prompt from its answer: a SentencePiece tokenizer adds a word-start piece to text tokenized on its
        own, so " a dog" alone can differ from " a dog" after "ASSISTANT:". When the two texts merge into
        one token at the seam no split exists there, and `text` is tokenized on its own, as it is for the
        PaliGemma format (its processor, not the prompt text, puts "\\n" between prefix and suffix)."""
        tok = self.tokenizer
        if self.prompt_format == "paligemma" or not before:
            return tok(text, add_special_tokens=False)["input_ids"]
        head = tok(before, add_special_tokens=False)["input_ids"]
        full = tok(before + text, add_special_tokens=False)["input_ids"]
        if full[: len(head)] == head:
            return full[len(head):]
        return tok(text, add_special_tokens=False)["input_ids"]

    def _check_system_prompt(self) -> None:
        """A template that drops system turns would silently lose the prompt: try both content shapes."""
        if self.prompt_format in PLAIN_FORMATS:
            raise UserError(f"{self.where}: the {self.prompt_format} prompt format has no system prompt; "
                            "pass --chat-template FILE to use one")
        probe = self.config.system_prompt
        for as_string in (False, True):
            self._system_as_string = as_string
            try:
                if probe in self.render(self._messages("?", True), True):
                    return
            except Exception:  # noqa: BLE001 - a template may reject one content shape; try the other
                continue
        raise UserError(f"{self.where}: the chat template does not render a system message, so system_prompt "
                        "would be lost; pass --chat-template FILE with one that does")

    @property
    def plain(self) -> bool:
        """True for a template-less format (one question, one answer, no roles: `PLAIN_FORMATS`)."""
        return self.prompt_format in PLAIN_FORMATS

    @property
    def image_token(self) -> str:
        """The image placeholder as text: BLIP-2/InstructBLIP processors hold an `AddedToken`, not a str."""
        tok = getattr(self.processor, "image_token", None) or "<image>"
        return getattr(tok, "content", None) or str(tok)

    # ------------------------------------------------------------ images and encoding
    def prepare_image(self, image):
        """The image as the model should see it before the processor: padded to a square (`pad`) or as is."""
        if self.config.image_aspect == "pad":
            return expand_to_square(image, mean_colour(self.processor.image_processor))
        return image

    def encode(self, prompts: Sequence[str], images: Sequence[Any] | None = None, padding_side: str = "left"):
        """The processor's full output for prompts with one optional image each (all or none).

        Images go in as one list per sample, so a processor that allows several images per sample
        (Gemma3, Idefics3) never reads a flat list as one sample with N images."""
        images = list(images) if images is not None else [None] * len(prompts)
        has = [im is not None for im in images]
        if any(has) and not all(has):
            raise ValueError("encode: mix of rows with and without an image; encode them separately")
        bos = getattr(self.tokenizer, "bos_token", None)
        # A template that writes BOS itself must not get a second one from the tokenizer.
        kw: dict[str, Any] = {"add_special_tokens": not (bos and prompts and prompts[0].startswith(bos))}
        if all(has) and images:
            kw["images"] = [[self.prepare_image(im)] for im in images]
        enc = self.processor(text=list(prompts), return_tensors="pt", padding=True, padding_side=padding_side, **kw)
        for key in NOT_MODEL_INPUTS:
            enc.pop(key, None)
        return enc

    def response_fill(self, key: str) -> int:
        """Value of a sequence-aligned tensor (`token_type_ids`, ...) on tokens after the prompt."""
        return self.family.response_type_ids if key == "token_type_ids" else 0

    def describe(self) -> dict[str, Any]:
        """For runs and manifests: settings, the format in use and the prompt rendered around {question}."""
        return {**self.config.to_dict(), "prompt_format": self.prompt_format,
                "prompt_example": self.prompt("{question}")}


# ------------------------------------------------------------------ re-batching
def sequence_keys(enc) -> list[str]:
    """Processor outputs aligned token by token with input_ids, of any rank: (batch, seq) like token_type_ids
    and mm_token_type_ids, or (batch, seq, ...) like Mllama's cross_attention_mask (batch, seq, images, tiles)."""
    ids = enc["input_ids"]
    return [k for k, v in enc.items() if k not in ("input_ids", "attention_mask")
            and hasattr(v, "shape") and v.dim() >= 2 and tuple(v.shape[:2]) == tuple(ids.shape)]


def split_sample(enc, row: int = 0) -> tuple[list[int], dict[str, Any]]:
    """Row `row` of a batch-of-one-or-more encoding: its real token ids and its per-sample tensors.

    Only valid for a batch encoded from ONE sample (image tensors are kept whole) or for the
    sequence-aligned keys of any batch."""
    mask = enc["attention_mask"][row].bool()
    ids = enc["input_ids"][row][mask].tolist()
    seq = set(sequence_keys(enc))
    feats: dict[str, Any] = {k: enc[k][row][mask].tolist() for k in seq}
    feats.update({k: v for k, v in enc.items() if k not in seq and k not in ("input_ids", "attention_mask")})
    return ids, feats


def merge_tensors(tensors: list) -> Any:
    """Per-sample tensors stacked along dim 0, zero-padding every other dim to the largest (LLaVA-NeXT's
    patch count, Idefics3's image count and size; the models drop the all-zero padding)."""
    import torch
    import torch.nn.functional as F

    if len(tensors) == 1:
        return tensors[0]
    shape = [max(t.shape[d] for t in tensors) for d in range(1, tensors[0].dim())]
    padded = []
    for t in tensors:
        pad = []
        for d in reversed(range(1, t.dim())):
            pad += [0, shape[d - 1] - t.shape[d]]
        padded.append(F.pad(t, pad) if any(pad) else t)
    return torch.cat(padded, 0)


def batch_rows(rows: Sequence[Sequence[int]], feats: Sequence[dict], pad_id: int, fill: dict[str, int] | None = None,
               side: str = "left") -> dict[str, Any]:
    """A padded batch of token `rows` with their per-sample tensors.

    feats[i] holds row i's sequence-aligned values as lists covering the START of the row (the
    prompt); the rest of the row gets `fill[key]` (0 by default). Every other tensor in feats[i]
    is that sample's image data, merged in row order by `merge_tensors`.
    """
    import torch

    fill = fill or {}
    width = max(len(r) for r in rows)
    seq_keys = sorted({k for f in feats for k, v in f.items() if isinstance(v, list)})
    out = {"input_ids": torch.full((len(rows), width), pad_id, dtype=torch.long),
           "attention_mask": torch.zeros((len(rows), width), dtype=torch.long)}
    given_rows = {k: [torch.as_tensor(f[k], dtype=torch.long) if k in f else None for f in feats] for k in seq_keys}
    for k in seq_keys:
        inner = next(g.shape[1:] for g in given_rows[k] if g is not None)
        out[k] = torch.zeros((len(rows), width, *inner), dtype=torch.long)
    for i, r in enumerate(rows):
        sl = slice(width - len(r), width) if side == "left" else slice(0, len(r))
        out["input_ids"][i, sl] = torch.tensor(list(r), dtype=torch.long)
        out["attention_mask"][i, sl] = 1
        for k in seq_keys:
            given = given_rows[k][i]
            given = given[:len(r)] if given is not None else out[k][i, :0]  # a row cut inside its prompt keeps its start
            rest = len(r) - len(given)
            if given.dim() > 1 and len(given) and k not in fill:
                # higher-rank (Mllama's cross-attention mask): later tokens repeat the last prompt row, as
                # generate extends it per decoded token (`_update_model_kwargs_for_generation`)
                tail = given[-1:].expand(rest, *given.shape[1:])
            else:
                tail = torch.full((rest, *given.shape[1:]), fill.get(k, 0), dtype=torch.long)
            out[k][i, sl] = torch.cat([given, tail])
    other = [k for k in dict.fromkeys(k for f in feats for k in f) if k not in seq_keys]
    for k in other:
        present = [f[k] for f in feats if k in f]
        out[k] = merge_tensors(present)
    return out


def to_device(batch: dict[str, Any], device, dtype) -> dict[str, Any]:
    """Tensors of `batch` on `device`; floating ones (pixels) in the model's `dtype`."""
    return {k: (v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device))
            if hasattr(v, "is_floating_point") else v for k, v in batch.items()}


# ------------------------------------------------------------------ forward outside generate()
def model_kwargs(model, batch: dict[str, Any], *, first: bool, cache=None, use_cache: bool = True,
                 position_ids=None) -> tuple[dict[str, Any], Any]:
    """(forward kwargs, position ids) for `batch` as `generate` would build them.

    first=True: positions come from the model's own `_prepare_position_ids_for_generation` (left
    padding counted out; Qwen-VL's 3-D M-RoPE rows computed from image_grid_thw). Later steps pass
    `position_ids` (the previous last + 1, as generate does). The model's
    `prepare_inputs_for_generation` then applies its own rules (PaliGemma's 1-based positions,
    Gemma3's token_type_ids only at prefill, pixel inputs only at prefill)."""
    ids = batch["input_ids"]
    extra = {k: v for k, v in batch.items() if k != "input_ids"}
    if first:
        position_ids = model._prepare_position_ids_for_generation(ids, {"input_ids": ids, **extra})
    extra.pop("position_ids", None)
    kw = model.prepare_inputs_for_generation(ids, cache=cache, position_ids=position_ids, use_cache=use_cache,
                                             is_first_iteration=first, **extra)
    return kw, position_ids
