"""The answers of evalsuite's own tasks: one (image, prompt) per request, resumable, sharded across ranks.

    records = generate_answers(ctx, images, prompt, gen, data_id)   # rank 0: all records; others: None

- Per-sample resume: every finished batch is appended to `RESUME/own/<ckpt id>/answers.rank<R>.jsonl`
  (evalsuite/models/cache.py: durable appends, torn last lines skipped), so a run killed mid-task and
  started again generates only the answers it had not finished. An entry's key covers everything that
  changes an answer: the checkpoint (weights and the prompt-format files beside them: `ckpt_id`), the
  data (`data_id`, a fingerprint of the annotation files) and image id, the question and the prompt
  settings (system prompt, chat template, image aspect), the decoding settings, and the device type
  (bf16 on GPU, fp32 on CPU). caption and chair share entries: the same request is answered once.
- Data parallel (world size > 1): each rank answers its shard of the images (`Dist.shard`), rank 0
  gathers the answers back into image order; the other ranks get None.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
from pathlib import Path

from evalsuite.types import GenConfig, GenRequest

log = logging.getLogger(__name__)

# files beside the weights that shape an answer: configs, tokenizer, processor, chat template
PROMPT_FILE_SUFFIXES = (".json", ".jinja", ".model", ".txt", ".tiktoken")
# ... except metadata no model reads: the evalsuite manifest, trainer state, the weights' own index
SKIPPED_FILES = ("evalsuite.json", "trainer_state.json")


def digest(obj) -> str:
    """sha256 (first 16 hex) of canonical JSON."""
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@functools.lru_cache(maxsize=64)
def _file_sha(path: str, size: int, mtime_ns: int) -> str:
    from evalsuite.files import sha256_file

    return sha256_file(path)[:16]


def file_fingerprint(paths: list[Path]) -> dict[str, str]:
    """{file name: sha256 (16 hex)} of data files (cached per size + mtime within a process)."""
    out = {}
    for p in paths:
        st = Path(p).stat()
        out[Path(p).name] = _file_sha(str(Path(p).resolve()), st.st_size, st.st_mtime_ns)
    return out


def prompt_files_id(ckpt: str | Path) -> str:
    """Fingerprint of a checkpoint's non-weight files (chat template, tokenizer, processor and generation
    configs): they change answers without changing the weights' hash."""
    files = sorted(p for p in Path(ckpt).iterdir()
                   if p.is_file() and p.suffix in PROMPT_FILE_SUFFIXES and p.name not in SKIPPED_FILES
                   and not p.name.endswith(".index.json"))
    return digest(file_fingerprint(files))


def _cache(ctx):
    if ctx.resume_root is None:
        return None
    from evalsuite.models.cache import ResponseCache

    return ResponseCache(Path(ctx.resume_root) / "own", ctx.ckpt_id, "answers", rank=ctx.dist.rank)


def generate_answers(ctx, images: list[dict], prompt: str, gen: GenConfig, data_id: str) -> list[dict] | None:
    """Answer records {key, image_id, image, prompt, answer} for `images` ({id, path}), in their order."""
    from tqdm.auto import tqdm

    from evalsuite.models.cache import request_key

    mine = ctx.dist.shard(images)
    cache = _cache(ctx)
    setting = {"data": data_id, "inputs": ctx.inputs, "device": ctx.device_type}
    if ctx.dtype:  # an explicit dtype (the default one follows from the device, keeping older keys valid)
        setting["dtype"] = ctx.dtype
    setting.update(ctx.engine_identity())  # answers of two engines never share an entry (HF adds nothing)
    keys = [request_key(ctx.ckpt_id, "answers", "generate", im["id"], json.dumps([prompt, setting], sort_keys=True),
                        gen.to_dict()) for im in mine]
    answers: dict[str, str] = {}
    if cache is not None:
        answers = {k: cache.get(k) for k in keys if k in cache}
    todo = [i for i, k in enumerate(keys) if k not in answers]
    if answers:
        log.info("answers: %d of %d taken from the resume cache, %d to generate", len(answers), len(keys), len(todo))
    batches = [todo[s:s + ctx.batch_size] for s in range(0, len(todo), ctx.batch_size)]
    for batch in tqdm(batches, desc="generate", unit="batch", disable=len(batches) < 2):
        out = ctx.generate([GenRequest(key=str(mine[i]["id"]), image=mine[i]["path"], prompt=prompt) for i in batch], gen)
        answers.update((keys[i], a) for i, a in zip(batch, out))
        if cache is not None:  # durable after every batch: a kill loses at most the batch in progress
            cache.put_many((keys[i], mine[i]["id"], "generate", a) for i, a in zip(batch, out))
    sent = ctx.loader.prompts().prompt(prompt)  # the text the processor received (template, system prompt)
    records = [{"key": str(im["id"]), "image_id": im["id"], "image": im["path"], "prompt": prompt,
                "prompt_text": sent, "answer": answers[k]} for im, k in zip(mine, keys)]
    parts = ctx.dist.gather(records)
    return None if parts is None else ctx.dist.unshard(parts)
