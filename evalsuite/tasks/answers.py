"""The answers of evalsuite's own tasks: one (image, prompt) per request, resumable, sharded across ranks.

    records = answer_items(ctx, items, gen, data_id, task)   # items {id, path, prompt}; rank 0: all records
    records = generate_answers(ctx, images, prompt, gen, data_id, task)   # one prompt for every image

`answer_items` is the one answer loop: caption, chair, amber_g/amber_d and mmhal call it, and so should a
new task (its docstring says what an item holds and which cache its entries go to).

- Per-sample resume: every finished batch is appended to `RESUME/own/<ckpt id>/answers.rank<R>.jsonl`
  (evalsuite/models/cache.py: durable appends, torn last lines skipped), so a run killed mid-task and
  started again generates only the answers it had not finished. An entry's key covers everything that
  changes an answer: the checkpoint (`ckpt_id`, evalsuite/identity.py's ModelId: weights, prompt files), the
  data (`data_id`, a fingerprint of the annotation files) and image id, the question and the prompt
  settings (system prompt, chat template, image aspect), the decoding settings, and the device type
  (bf16 on GPU, fp32 on CPU) and engine. caption, chair and amber share entries: the same request is
  answered once; mmhal keeps its own (`namespace`).
- Data parallel (world size > 1): each rank answers its shard of the images (`Dist.shard`), rank 0
  gathers the answers back into image order; the other ranks get None.
- Nothing scores nothing: when more than `MAX_EMPTY_SHARE` of a task's answers are empty (an encoder-decoder
  sliced at the prompt length, a model that emits EOS at once) the task fails in one line naming it and
  a sample (`answers_failure`), before any metric is computed: CHAIR over empty captions is 0, which would
  otherwise be stored as a perfect score. The run stops there, as on any RunFailure; tasks finished before it
  stay stored. Under several ranks rank 0 decides on the gathered answers and broadcasts its verdict
  (`fail_together`), so every rank raises the same RunFailure at the same point instead of the others
  waiting at the next collective. lmms-eval tasks follow the same rule on the generate_until answers of
  evalsuite's adapter (evalsuite/lmms/task.py `empty_answers_failure`).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from evalsuite.gen_settings import GenConfig
from evalsuite.types import GenRequest

log = logging.getLogger(__name__)

# above this share of empty answers a task's metrics measure the absence of answers, not the model
MAX_EMPTY_SHARE = 0.5


def _cache(ctx, name: str = "answers"):
    if ctx.resume_root is None:
        return None
    from evalsuite.models.cache import ResponseCache

    return ResponseCache(Path(ctx.resume_root) / "own", ctx.ckpt_id, name, rank=ctx.dist.rank)


def empty_answers_message(task: str, total: int, empty: int, sample: str, unstored: str = "it") -> str | None:
    """The one-line failure when more than MAX_EMPTY_SHARE of `total` answers are empty, else None.
    It says what happens next: nothing of `unstored` (the task, or the group holding it) is stored and the
    run stops (a RunFailure), as for every task, own or lmms-eval's."""
    if not total or empty <= MAX_EMPTY_SHARE * total:
        return None
    return (f"{task}: {empty} of {total} answers are empty (more than {MAX_EMPTY_SHARE:.0%}); nothing stored "
            f"for {unstored} and the run stops here (tasks finished before it stay stored). Sample: {sample}")


def answers_failure(task: str, records: list[dict]) -> str | None:
    """`empty_answers_message` for own-task answer records, the sample being the first empty one."""
    empty = [r for r in records if not str(r.get("answer") or "").strip()]
    if not empty:
        return None
    r = empty[0]
    return empty_answers_message(task, len(records), len(empty), f"image {r.get('image_id')!r}, prompt "
                                 f"{str(r.get('prompt_text') or r.get('prompt'))!r} -> answer {r.get('answer')!r}")


def fail_together(dist, message: str | None) -> None:
    """Rank 0's verdict (`message`, None = pass; what the other ranks pass is ignored) on every rank: all
    raise the same RunFailure here, or none does. Every rank must call it, as any collective."""
    from evalsuite.errors import RunFailure

    message = dist.broadcast(message if dist.is_main else None)
    if message:
        exc = RunFailure(message)
        exc.collective = dist.distributed
        raise exc


def answer_items(ctx, items: list[dict], gen: GenConfig, data_id: str, task: str,
                 namespace: str = "answers") -> list[dict] | None:
    """The model's answer to every item, the one answer loop of evalsuite's own tasks.

    items: {id, path, prompt}, optionally image_id and image_sha, in the order the records come back:
        id        an int, unique in the task: the entry's doc id in the cache key; the record's key is str(id)
        path      the image file given to the model
        prompt    the question as the task asks it (the loader's prompt settings wrap it)
        image_id  the record's image_id (default: id)
        image_sha a digest of the image's bytes, put in the key when given (when `data_id` does not
                  already cover the images' contents)
    gen: the decoding settings; data_id: a fingerprint of the task's data (in every key); task: the name
    in the progress bar, the log and the empty-answers failure.
    namespace: the cache the entries go to, and the key's task field. "answers" (the default) is the cache
    caption, chair and amber share (`RESUME/own/<ckpt id>/answers.rank<R>.jsonl`: the same request is
    answered once whichever task asks); another name is a task's own (`<namespace>_answers.rank<R>.jsonl`;
    mmhal's). A new task may use either; changing a task's namespace, or what its items put in the key,
    orphans its stored entries (tests/unit/test_answer_items.py pins every task's keys).

    Returns on rank 0 the records {key, image_id, image, prompt, prompt_text, answer} of all items in their
    order (prompt_text = what the processor received: template, system prompt); on the other ranks None.
    Each rank answers its shard (`Dist.shard`) in batches of ctx.batch_size, the finished ones from the
    resume cache, every batch durable once answered; rank 0 gathers the shards and decides the
    empty-answers verdict (`answers_failure`) for every rank (`fail_together`): a RunFailure on all ranks or
    none. A task that fails after this point on rank 0 alone (e.g. while judging) passes its verdict through
    `fail_together` too.
    """
    from evalsuite.identity import inputs_identity
    from evalsuite.models.cache import request_key
    from evalsuite.progress import progress_bar

    bad = next((it for it in items if not isinstance(it["id"], int) or isinstance(it["id"], bool)), None)
    if bad is not None:   # the key's doc id is an int: a task with other ids passes their index
        raise TypeError(f"answer_items: {task}: item id {bad['id']!r} is not an int")
    mine = ctx.dist.shard(items)
    cache = _cache(ctx, "answers" if namespace == "answers" else f"{namespace}_answers")
    setting = {"data": data_id, "inputs": inputs_identity(ctx.loader.inputs), "device": ctx.device_type}
    if ctx.dtype:  # an explicit dtype (the default one follows from the device, keeping older keys valid)
        setting["dtype"] = ctx.dtype
    setting.update(ctx.engine_identity())  # answers of two engines never share an entry (HF adds nothing)

    def content(it: dict) -> str:
        parts = [it["prompt"], it["image_sha"], setting] if "image_sha" in it else [it["prompt"], setting]
        return json.dumps(parts, sort_keys=True)

    keys = [request_key(ctx.ckpt_id, namespace, "generate", it["id"], content(it), gen.to_dict()) for it in mine]
    answers: dict[str, str] = {k: cache.get(k) for k in keys if k in cache} if cache is not None else {}
    todo = [i for i, k in enumerate(keys) if k not in answers]
    if answers:
        log.info("%s answers: %d of %d taken from the resume cache, %d to generate", task, len(answers),
                 len(keys), len(todo))
    batches = [todo[s:s + ctx.batch_size] for s in range(0, len(todo), ctx.batch_size)]
    for batch in progress_bar(batches, desc=task, unit="batch", disable=len(batches) < 2):
        out = ctx.generate([GenRequest(key=str(mine[i]["id"]), image=mine[i]["path"], prompt=mine[i]["prompt"])
                            for i in batch], gen)
        answers.update((keys[i], a) for i, a in zip(batch, out))
        if cache is not None:  # durable after every batch: a kill loses at most the batch in progress
            cache.put_many((keys[i], mine[i]["id"], "generate", a) for i, a in zip(batch, out))
    prompts = ctx.loader.prompts()   # the text the processor received (template, system prompt), per question
    sent = {p: prompts.prompt(p) for p in {it["prompt"] for it in mine}}
    records = [{"key": str(it["id"]), "image_id": it.get("image_id", it["id"]), "image": it["path"],
                "prompt": it["prompt"], "prompt_text": sent[it["prompt"]], "answer": answers[k]}
               for it, k in zip(mine, keys)]
    parts = ctx.dist.gather(records)
    records = None if parts is None else ctx.dist.unshard(parts)
    # decided on rank 0 (it alone holds every answer), raised on every rank: a failure on rank 0 alone
    # would leave the others waiting at the next collective for ever
    fail_together(ctx.dist, None if records is None else answers_failure(task, records))
    return records


def scored_on_rank0(ctx, answers: list[dict] | None, score):
    """`score(answers)` on rank 0 (the only rank `answer_items` gives the answers to), its RunFailure (a
    judge failing, too many unparsable replies) raised on every rank or on none: a failure on rank 0 alone
    would leave the others waiting at the next collective. Returns the result on rank 0, None elsewhere."""
    from evalsuite.errors import RunFailure

    result, failure = None, None
    if answers is not None:
        try:
            result = score(answers)
        except RunFailure as e:
            failure = str(e)
    fail_together(ctx.dist, failure)
    return result


def generate_answers(ctx, images: list[dict], prompt: str, gen: GenConfig, data_id: str,
                     task: str = "answers") -> list[dict] | None:
    """`answer_items` with one prompt for every image of `images` ({id, path}), in the shared cache."""
    return answer_items(ctx, [{"id": im["id"], "path": im["path"], "prompt": prompt} for im in images], gen,
                        data_id, task)
