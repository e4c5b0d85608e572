"""`tree.engine: pool`: the group beam search of `search.py`, run as a continuously refilled pool of rows
with prefix reuse and the search on the device. Same trees as the one-node reference (`engine: reference`).

What differs from the reference engine (`engines.ReferenceEngine` + `search.group_beam_search`), and
what does not:
  * the per-node search is the reference's own code (`search.GroupBeams.advance`, HF group beam search
    semantics: the module docstring of `search.py`), over every node in the pool, each at its own step `t`;
  * continuous refill: a node's rows leave the pool when its search ends, and nodes of any
    prompt whose level was pruned join at the next step (no lockstep over a prompt batch): the scheduling
    of `schedule.Refill`, which the vLLM engine runs too. Bounded by `tree.kv_budget` (cached tokens: pool
    rows x width + the kept contexts; `auto` from the free device memory), and by the optional caps
    `tree.prompt_batch` (prompts resident) and `tree.batch_nodes` (nodes searching at once);
  * prefix reuse: a prompt is prefilled once (its image through the vision tower once); a node's context
    KV (prompt + response so far, one row) is kept until its kept children are prefilled, and a child's
    context is its parent's plus one forward over the child's own sentence (batched with every other
    node that is ready at that step). Kept context rows are compacted (mask holes dropped), so a row
    costs its real length;
  * beams share their node's context (`tree.share_prefix`, the default): a node searching is one row, its
    context once and its beams' tokens side by side, attended through a 4D mask (`Packed`); that row is
    the only copy of the context while the node searches (cut out again for its children when it ends).
    `share_prefix: false`, or an attention that takes no dense mask: each beam row holds its own copy;
  * on the device: log-softmax, penalties, top-k and finishing are tensor ops where the rows live; the
    host reads one flag vector per step and the finished hypotheses (ids + scores) of ended nodes.
Where a cached prefix is computed in pieces (prompt, then sentence by sentence) instead of in one
prefill, floating-point rounding of the logits can differ in the last bits: a tree can then differ
only where two candidates' scores are within that rounding (tests/unit/test_csr_pool.py prints such cases).

Families whose cache is not made of plain `DynamicLayer`s (linear attention, static caches) cannot have
rows cut and stacked here, nor can sliding-window layers once a row would reach the window (before that
they attend every token, as full layers): the engine grows their trees on the reference engine and says
so in the log.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from typing import Any, Sequence

import torch

from training.csr.rules import Stats
from training.csr.search import GroupBeams, Hyp, SearchSpec

log = logging.getLogger(__name__)


# ------------------------------------------------------------------ rows: KV + mask + positions
@dataclass
class Rows:
    """Rows of cached context: per-layer keys/values [R, H, W, D] (left-padded), mask [R, W], the next
    position of each row (position tensor layout of the model: [R, 1] or [3, R, 1] for M-RoPE)."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    mask: torch.Tensor
    next_pos: torch.Tensor

    @property
    def n(self) -> int:
        return self.mask.shape[0]

    @property
    def width(self) -> int:
        return self.mask.shape[1]

    def select(self, idx: torch.Tensor) -> "Rows":
        """Keep rows `idx`, in place, layer by layer (each layer's old tensors go before the next is
        copied, as `Cache.reorder_cache` does: the pool never exists twice)."""
        for i, (k, v) in enumerate(self.kv):
            self.kv[i] = (k.index_select(0, idx), v.index_select(0, idx))
        self.mask, self.next_pos = self.mask.index_select(0, idx), self.next_pos.index_select(-2, idx)
        return self.trim()

    def repeat(self, r: int) -> "Rows":
        kv = [(k.repeat_interleave(r, 0), v.repeat_interleave(r, 0)) for k, v in self.kv]
        return Rows(kv, self.mask.repeat_interleave(r, 0), self.next_pos.repeat_interleave(r, dim=-2))

    def trim(self) -> "Rows":
        """Drop the leading columns no row attends to (left padding left over by rows that went)."""
        if self.n == 0:
            return self
        used = self.mask.any(0)
        first = int(used.int().argmax()) if bool(used.any()) else self.width
        if first == 0:
            return self
        self.kv = [(k[:, :, first:], v[:, :, first:]) for k, v in self.kv]
        self.mask = self.mask[:, first:]
        return self

    def compact(self, i: int) -> "Rows":
        """Row i alone, its masked columns (padding, holes) dropped."""
        cols = self.mask[i].nonzero().squeeze(1)
        kv = [(k[i:i + 1].index_select(2, cols), v[i:i + 1].index_select(2, cols)) for k, v in self.kv]
        return Rows(kv, self.mask[i:i + 1, cols], self.next_pos.narrow(-2, i, 1))

    def cache(self):
        """A DynamicCache over these tensors without copying them (its `update` appends by `torch.cat`)."""
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        cache = DynamicCache()
        for k, v in self.kv:
            layer = DynamicLayer()
            layer.lazy_initialization(k, v)
            layer.keys, layer.values = k, v
            cache.layers.append(layer)
        return cache


def _pad_left(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    extra = width - t.shape[dim]
    if extra == 0:
        return t
    shape = list(t.shape)
    shape[dim] = extra
    return torch.cat([t.new_zeros(shape), t], dim)


def stack(parts: Sequence[Rows], consume: bool = False) -> Rows:
    """Rows of several groups in one batch, left-padded to the widest. consume=True: the parts' tensors
    are dropped layer by layer as the batch is built (the pool is never held twice); the parts are
    unusable afterwards."""
    parts = [p for p in parts if p.n]
    if len(parts) == 1:
        return parts[0]
    w = max(p.width for p in parts)
    kv = []
    for layer in range(len(parts[0].kv)):
        kv.append((torch.cat([_pad_left(p.kv[layer][0], w, 2) for p in parts], 0),
                   torch.cat([_pad_left(p.kv[layer][1], w, 2) for p in parts], 0)))
        if consume:
            for p in parts:
                p.kv[layer] = None
    return Rows(kv, torch.cat([_pad_left(p.mask, w, 1) for p in parts], 0),
                torch.cat([p.next_pos for p in parts], -2))


@dataclass
class Packed:
    """The pool with beams sharing their node's context (`tree.share_prefix`): ONE row per node, holding the
    context once and then each step's B beam tokens side by side. `rows.mask` [N, W] marks the columns a row
    holds (not left padding); `see` [N, B, W] the columns beam b attends (the context and its own
    ancestors' tokens: beam search reorders beams, so a beam's columns follow its lineage)."""

    rows: Rows
    see: torch.Tensor

    @property
    def n(self) -> int:
        return self.rows.n

    @property
    def width(self) -> int:
        return self.rows.width

    @staticmethod
    def of(ctx: Rows, beams: int) -> Packed:
        """A node's packed row from its compact context row: every beam sees the whole context."""
        return Packed(ctx, ctx.mask.bool()[:, None, :].expand(ctx.n, beams, ctx.width).clone())

    def context(self, i: int, width: int, next_pos: torch.Tensor) -> Rows:
        """Row i's context (its first `width` held columns: no beam column comes before them, and every
        beam attends them, so trimming never cuts them) as a compact row whose next position is `next_pos`."""
        cols = self.rows.mask[i].nonzero().squeeze(1)[:width]
        kv = [(k[i:i + 1].index_select(2, cols), v[i:i + 1].index_select(2, cols)) for k, v in self.rows.kv]
        return Rows(kv, self.rows.mask[i:i + 1, cols], next_pos)

    def held(self) -> torch.Tensor:
        """KV columns each node's row holds (left padding not counted), from the row's own mask."""
        return self.rows.mask.sum(1)

    def select(self, rows: torch.Tensor, beams: int) -> Packed:
        """The search's score rows to go on (node-major, `beams` each: `GroupBeams.advance`): keep their
        nodes, each new beam seeing what its source beam saw."""
        rows = rows.view(-1, beams)
        node, src = rows[:, 0] // beams, rows % beams
        see = self.see.index_select(0, node)
        self.see = torch.take_along_dim(see, src[..., None], 1)
        self.rows.kv = [(k.index_select(0, node), v.index_select(0, node)) for k, v in self.rows.kv]
        self.rows.mask, self.rows.next_pos = self.rows.mask.index_select(0, node), self.rows.next_pos.index_select(-2, node)
        return self.trim()

    def trim(self) -> Packed:
        """Drop the leading columns no beam attends to."""
        if self.n == 0:
            return self
        used = self.see.any(1).any(0)
        first = int(used.int().argmax()) if bool(used.any()) else self.width
        if first:
            r = self.rows
            r.kv = [(k[:, :, first:], v[:, :, first:]) for k, v in r.kv]
            r.mask, self.see = r.mask[:, first:], self.see[:, :, first:]
        return self


def stack_packed(parts: Sequence[Packed]) -> Packed:
    """`stack` of packed rows (consuming the parts), their `see` left-padded alike."""
    parts = [p for p in parts if p.n]
    if len(parts) == 1:
        return parts[0]
    w = max(p.width for p in parts)
    see = torch.cat([_pad_left(p.see, w, 2) for p in parts], 0)
    return Packed(stack([p.rows for p in parts], consume=True), see)


def share_unsupported(model) -> str | None:
    """Why this model's beams cannot share their node's row (None: they can): the packed step passes a 4D
    attention mask and explicit positions, which the sdpa and eager attention of a causal decoder take
    as given (transformers' masking_utils returns a 4D mask unchanged); flash and flex kernels take no
    dense mask."""
    impls = {getattr(c, "_attn_implementation", None)
             for c in (model.config, model.config.get_text_config(decoder=True))}
    bad = sorted(str(i) for i in impls - {"sdpa", "eager"})
    return f"attention implementation {', '.join(bad)}" if bad else None


def _cache_rows(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def unsupported(cache) -> str | None:
    """Why this cache's rows cannot be cut, padded and stacked here (None: they can). Sliding-window layers
    can while every row is shorter than the window (`window`): they then hold and attend every token."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    if cache is None:
        return "no KV cache on the model's own output"
    if type(cache) is not DynamicCache:
        return f"cache class {type(cache).__name__}"
    kinds = {type(layer).__name__ for layer in cache.layers
             if type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer)}
    return f"cache layers {sorted(kinds)}" if kinds else None


def window(cache) -> int | None:
    """The shortest sliding window among the cache's layers (None: no sliding layer)."""
    from transformers.cache_utils import DynamicSlidingWindowLayer

    sizes = [layer.sliding_window for layer in cache.layers if type(layer) is DynamicSlidingWindowLayer]
    return min(sizes) if sizes else None


# ------------------------------------------------------------------ the model calls
class Runner:
    """Prefills and decode steps of one model over `Rows` (positions and masks as `search._Batch`)."""

    def __init__(self, model, spec: SearchSpec, stats: Stats):
        self.model, self.spec, self.stats = model, spec, stats
        self.device = next(model.parameters()).device
        self.fill = dict(spec.response_fill)
        self.seq_keys: list[str] = []
        self.window: int | None = None  # sliding-window layers: every row must stay shorter (PoolEngine checks)

    def _out(self, out):
        # a model that nests its language model's output (BLIP-2 / InstructBLIP) has no cache here: None
        # is `unsupported` and that model runs the reference path, which steps its language model
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return cache, out.logits[:, -1].float()

    def prompts(self, contexts: list[list[int]], features: list[dict]) -> tuple[list[Rows], torch.Tensor, Any]:
        """Prefill prompts (images through the vision tower here, once): per prompt its compact context row."""
        from evalsuite.models.inputs import batch_rows, model_kwargs, sequence_keys, to_device

        batch = batch_rows(contexts, features, self.spec.pad_id, self.fill, side="left")
        batch = to_device(batch, self.device, self.model.dtype)
        self.seq_keys = sequence_keys(batch)
        if any(batch[k].dim() > 2 for k in self.seq_keys):
            # token-aligned inputs of higher rank (Mllama's cross-attention mask) are extended per step
            # by the reference path only
            return [], None, "token-aligned inputs of rank > 2 (" + ", ".join(
                k for k in self.seq_keys if batch[k].dim() > 2) + ")"
        kw, pos = model_kwargs(self.model, batch, first=True)
        cache, logits = self._out(self.model(**kw, logits_to_keep=1))
        n = sum(len(c) for c in contexts)
        self.stats.prefill_tokens += n
        self.stats.prompt_tokens += n
        if (why := unsupported(cache)) is not None:
            return [], logits, why
        self.window = window(cache)
        if self.window is not None and max(len(c) for c in contexts) >= self.window - 1:
            return [], logits, f"a prompt of {max(len(c) for c in contexts)} tokens reaches the sliding window ({self.window})"
        rows = Rows(_cache_rows(cache), batch["attention_mask"], pos[..., -1:] + 1)
        return [rows.compact(i) for i in range(len(contexts))], logits, None

    def extend(self, parents: list[Rows], tails: list[list[int]]) -> tuple[list[Rows], torch.Tensor]:
        """Each parent context row plus its tail tokens, in ONE forward: the new compact context rows
        and each row's next-token logits. Tails are left-padded inside the chunk (holes masked)."""
        from evalsuite.models.inputs import model_kwargs

        base = stack(parents)
        n, c = base.n, max(len(t) for t in tails)
        ids = torch.full((n, c), self.spec.pad_id, dtype=torch.long)
        chunk_mask = torch.zeros((n, c), dtype=torch.long)
        for i, t in enumerate(tails):
            ids[i, c - len(t):] = torch.tensor(t, dtype=torch.long)
            chunk_mask[i, c - len(t):] = 1
        chunk_mask = chunk_mask.to(self.device)
        lens = torch.tensor([len(t) for t in tails], device=self.device)
        # Row i's real tokens get positions next_pos .. next_pos + len - 1 (pads: clamped, never attended).
        offs = (torch.arange(c, device=self.device)[None, :] - (c - lens)[:, None]).clamp(min=0)
        pos = base.next_pos + offs  # broadcasts over M-RoPE's leading axis
        mask = torch.cat([base.mask, chunk_mask], 1)
        batch = {"input_ids": ids.to(self.device), "attention_mask": mask,
                 **{k: torch.full((n, c), self.fill.get(k, 0), dtype=torch.long, device=self.device)
                    for k in self.seq_keys}}
        kw, _ = model_kwargs(self.model, batch, first=False, cache=base.cache(), position_ids=pos)
        cache, logits = self._out(self.model(**kw, logits_to_keep=1))
        self.stats.prefill_tokens += int(lens.sum())
        self.stats.nodes_prefilled += n
        rows = Rows(_cache_rows(cache), mask, base.next_pos + lens.view(*([1] * (base.next_pos.dim() - 2)), n, 1))
        return [rows.compact(i) for i in range(n)], logits

    def step(self, rows: Rows, tokens: torch.Tensor) -> tuple[Rows, torch.Tensor]:
        """One decode step: every row feeds one token."""
        from evalsuite.models.inputs import model_kwargs

        n = rows.n
        mask = torch.cat([rows.mask, torch.ones((n, 1), dtype=torch.long, device=self.device)], 1)
        batch = {"input_ids": tokens.view(-1, 1), "attention_mask": mask,
                 **{k: torch.full((n, 1), self.fill.get(k, 0), dtype=torch.long, device=self.device)
                    for k in self.seq_keys}}
        cache = rows.cache()
        rows.kv = []  # the cache alone holds the tensors: each layer's update frees its old ones
        kw, _ = model_kwargs(self.model, batch, first=False, cache=cache, position_ids=rows.next_pos)
        del cache
        cache, logits = self._out(self.model(**kw))
        return Rows(_cache_rows(cache), mask, rows.next_pos + 1), logits

    def step_packed(self, packed: Packed, tokens: torch.Tensor) -> tuple[Packed, torch.Tensor]:
        """One decode step of packed rows: each node's row feeds its B beams' tokens side by side; beam b's
        query attends the columns it sees plus its own new token, at the position after its context +
        its tokens so far (the same for every beam of a node). Logits [N * B, V], node-major."""
        from evalsuite.models.inputs import model_kwargs

        r, n, B = packed.rows, packed.n, packed.see.shape[1]
        eye = torch.eye(B, dtype=torch.bool, device=self.device).expand(n, B, B)
        see = torch.cat([packed.see, eye], 2)
        mask4 = see[:, None]
        if self.eager:  # eager attention adds the mask to its scores
            mask4 = torch.zeros(mask4.shape, dtype=self.model.dtype, device=self.device).masked_fill(
                ~mask4, torch.finfo(self.model.dtype).min)
        pos = r.next_pos.expand(*r.next_pos.shape[:-1], B)
        batch = {"input_ids": tokens.view(n, B), "attention_mask": mask4,
                 **{k: torch.full((n, B), self.fill.get(k, 0), dtype=torch.long, device=self.device)
                    for k in self.seq_keys}}
        cache = r.cache()
        r.kv = []  # the cache alone holds the tensors: each layer's update frees its old ones
        kw, _ = model_kwargs(self.model, batch, first=False, cache=cache, position_ids=pos)
        del cache
        out = self.model(**kw)
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        mask = torch.cat([r.mask, torch.ones((n, B), dtype=r.mask.dtype, device=self.device)], 1)
        rows = Rows(_cache_rows(cache), mask, r.next_pos + 1)
        return Packed(rows, see), out.logits.float().reshape(n * B, -1)

    @property
    def eager(self) -> bool:
        return getattr(self.model.config.get_text_config(decoder=True), "_attn_implementation", None) == "eager"


# ------------------------------------------------------------------ the search state of many nodes
class Search(GroupBeams):
    """The group beam search state of every node in the pool, on the device; node i owns rows
    i*B .. i*B+B-1. Each step is `search.GroupBeams.advance` (the step `search.group_beam_search` runs),
    each node at its own step; the host reads are counted in `stats`."""

    def __init__(self, spec: SearchSpec, device, stats: Stats):
        super().__init__(spec, device)
        self.stats = stats

    def step(self, logits: torch.Tensor) -> tuple[list[tuple[Any, list[Hyp]]], torch.Tensor, torch.Tensor]:
        """One step of every node: (ended nodes with their hypotheses, cache rows to keep, their tokens)."""
        out = self.advance(logits, host=self.stats.host)
        self.stats.steps += 1
        return out

# ------------------------------------------------------------------ the tree driver
class PoolEngine:
    """Grows the trees of `rules` (same node ids, statuses and pruning as the reference engine) over a
    refilled pool (`schedule.Refill`); `fallback` (the reference engine) grows them where this model's cache
    cannot be pooled."""

    def __init__(self, rules, stats: Stats, fallback):
        self.rules, self.cfg, self.spec = rules, rules.cfg, rules.spec
        self.model = rules.vlm.model
        self.stats, self.fallback = stats, fallback
        self.runner = Runner(self.model, self.spec, self.stats)
        self.device = self.runner.device
        # `tree.share_prefix`: a node's beams share one row holding its context once (Packed), where the
        # model's attention takes a 4D mask; else each beam row holds its own copy of the context
        self.share = bool(self.cfg.share_prefix)
        if self.share and (why := share_unsupported(self.model)) is not None:
            log.warning("tree.engine pool: %s cannot share a node's context among its beams (%s); each beam "
                        "row holds its own copy", type(self.model).__name__, why)
            self.share = False

    def grow(self, records: Sequence[dict], progress: bool = True) -> list[Any]:
        """The trees, in record order. progress=True: a bar of trees done / total."""
        self._bar, self._progress = None, progress
        try:
            trees = self._generate(records)
        finally:
            if self._bar is not None:
                self._bar.close()
        return trees if trees is not None else self.fallback.grow(records, progress=progress)

    def _advance(self, done: int, total: int) -> None:
        """The bar, made once the first prompts were prefilled (a model that falls back shows none here)."""
        if self._bar is None:
            from evalsuite.progress import progress_bar

            self._bar = progress_bar(total=total, desc="csr trees", unit="tree", disable=not self._progress)
        self._bar.update(done - self._bar.n)

    def budget(self, bpt: int | None) -> int | None:
        """`tree.kv_budget` in tokens (None: `auto` before the bytes of one cached token are known)."""
        from training.csr.schedule import kv_budget_tokens

        if bpt is None and self.cfg.kv_budget == "auto":
            return None
        budget = kv_budget_tokens(self.cfg.kv_budget, self.model, bpt)
        log.info("tree.engine pool: KV budget %d tokens (kv_budget %s, %s bytes per token)",
                 budget, self.cfg.kv_budget, bpt)
        return budget

    @torch.inference_mode()
    def _generate(self, records: Sequence[dict]) -> list[Any] | None:
        from training.csr.schedule import Refill, bytes_per_token

        B = self.spec.num_beams
        s = Refill(self.rules, self.stats, records)
        search = Search(self.spec, self.device, self.stats)
        pool: Rows | Packed | None = None
        logits: torch.Tensor | None = None
        # `auto` needs the bytes of one cached token: from the text config, else known after the first
        # prefill (which then takes one prompt alone)
        budget = self.budget(bytes_per_token(self.model))
        starts: dict[int, Any] = {}
        self._ctx_at: dict[tuple[int, int], tuple[int, torch.Tensor]] = {}  # shared: context width, next position
        # shared: a node is one row, grown by B tokens a step; else B rows grown by one. With copies, a node's
        # context is also kept beside its rows; shared, its row is the only copy while it searches.
        per, grow = (1, B * self.spec.max_new_tokens) if self.share else (B, self.spec.max_new_tokens)
        kept = 0 if self.share else 1
        while s.busy(len(search)):
            new_rows, new_logits, new_keys = [], [], []
            # What the pool will hold, bounded: every row padded to the widest and grown by its tokens to
            # come (max_new_tokens, B x that for a shared row), plus the kept context rows. A node or prompt
            # joins only within the budget (one always goes when nothing else runs).
            held = sum(c.width for t in s.trees.values() for c in t.ctx.values())
            n_rows, width = (pool.n, pool.width) if pool is not None else (0, 0)

            def fits(w: int, first: bool) -> bool:
                return first or budget is None or (n_rows + per) * (max(width, w) + grow) + held + kept * w <= budget

            # 1. nodes whose parent's level was pruned: one forward over their sentences
            if s.ready:
                batch = []
                for item in s.ready[:s.node_room(len(search))]:
                    r, nid, par = item
                    w = s.trees[r].ctx[par].width + len(self._tail(s.trees[r].prompt.tree, nid, par))
                    if not fits(w, not batch and not len(search)):
                        break
                    batch.append(item)
                    n_rows, width, held = n_rows + per, max(width, w), held + kept * w
                s.ready = s.ready[len(batch):]
                if batch:
                    parents = [s.trees[r].ctx[par] for r, _, par in batch]
                    tails = [self._tail(s.trees[r].prompt.tree, nid, par) for r, nid, par in batch]
                    if self._past_window(max(p.width for p in parents) + max(len(t) for t in tails)):
                        return None
                    ctx, lg = self.runner.extend(parents, tails)
                    for j, (r, nid, par) in enumerate(batch):
                        new_rows.append(self._join(r, nid, ctx[j], s.trees[r]))
                        new_logits.append(lg[j:j + 1].repeat_interleave(B, 0))
                        new_keys.append((r, nid))
                    for r in {r for r, _, _ in batch}:
                        s.release(r)
            # 2. prompts, within the caps and the budget (`auto` before its first prefill: one prompt)
            room = s.prompt_room(len(search), len(new_keys)) if budget is not None else min(1, len(s.waiting))
            take = []
            while s.waiting and len(take) < room:
                r = s.waiting[0]
                if r not in starts:
                    starts[r] = self.rules.start(records[r])
                w = len(starts[r].tree.prompt_ids)
                if not fits(w, not take and not len(search) and not new_keys):
                    break
                take.append(s.waiting.pop(0))
                n_rows, width, held = n_rows + per, max(width, w), held + kept * w
            if take:
                ps = [starts.pop(r) for r in take]
                ctx, lg, why = self.runner.prompts([p.tree.prompt_ids for p in ps], [p.features for p in ps])
                if why is not None:
                    log.warning("tree.engine pool: %s cannot be cut and stacked (%s); falling back to the "
                                "reference path", type(self.model).__name__, why)
                    return None
                if budget is None:  # `auto`
                    budget = self.budget(sum(k.shape[1] * k.shape[3] * k.element_size() * 2 for k, _ in ctx[0].kv))
                for j, (r, p) in enumerate(zip(take, ps)):
                    new_rows.append(self._join(r, 0, ctx[j], s.start(r, p)))
                    new_logits.append(lg[j:j + 1].repeat_interleave(B, 0))
                    new_keys.append((r, 0))
            if new_keys:
                parts = ([pool] if pool is not None else []) + new_rows
                pool = stack_packed(parts) if self.share else stack(parts, consume=True)
                logits = torch.cat(([logits] if logits is not None else []) + new_logits)
                search.add(new_keys)
            self.stats.peak_tokens = max(self.stats.peak_tokens, self._tokens(pool, s.trees))
            # 3. one search step over every node, then one forward over the rows that go on
            keys, held_now = list(search.keys), (self._held(pool) if pool is not None else None)
            ended, rows, toks = search.step(logits)
            if ended and held_now is not None:
                self._count_held(keys, held_now, [k for k, _ in ended])
            if ended and self.share:  # the contexts of ended nodes, cut from their rows for their children
                at = {k: i for i, k in enumerate(keys)}
                for r, nid in (k for k, _ in ended):
                    s.trees[r].ctx[nid] = pool.context(at[(r, nid)], *self._ctx_at.pop((r, nid)))
            for (r, nid), hyps in ended:
                s.node_ended(r, nid, hyps)
            self._advance(len(s.done), len(records))
            if len(search):
                if self._past_window(pool.width + (B if self.share else 1)):
                    return None
                if self.share:
                    pool, logits = self.runner.step_packed(pool.select(rows, B), toks)
                else:
                    pool, logits = self.runner.step(pool.select(rows), toks)
                self.stats.peak_tokens = max(self.stats.peak_tokens, self._tokens(pool, s.trees))
            else:
                pool, logits = None, None
        return s.result()

    def _past_window(self, width: int) -> bool:
        """A forward over rows this wide would pass the model's sliding window, where a sliding layer
        attends fewer tokens than the reference: said, and the trees are grown on the reference path."""
        if self.runner.window is None or width < self.runner.window - 1:
            return False
        log.warning("tree.engine pool: a row of %d tokens would reach %s's sliding window (%d); falling back to "
                    "the reference path", width, type(self.model).__name__, self.runner.window)
        for f in fields(Stats):  # the reference path counts from the start
            setattr(self.stats, f.name, f.default)
        return True

    def _join(self, r: int, nid: int, ctx: Rows, resident) -> Rows | Packed:
        """Node `nid` of prompt `r` joins the pool from its compact context row. Shared: the row is the only
        copy of the context while the node searches (cut out again when it ends); with copies: B rows, and
        the context row is kept beside them for the node's children."""
        if self.share:
            self._ctx_at[(r, nid)] = (ctx.width, ctx.next_pos)
            return Packed.of(ctx, self.spec.num_beams)
        resident.ctx[nid] = ctx
        return ctx.repeat(self.spec.num_beams)

    def _held(self, pool: Rows | Packed) -> torch.Tensor:
        """KV columns each searching node holds in the pool (its row, or its B beam rows), left padding not
        counted: read from the rows' masks, which mark the cache columns each row holds."""
        if self.share:
            return pool.held()
        return pool.mask.sum(1).view(-1, self.spec.num_beams).sum(1)

    def _count_held(self, keys: list, held: torch.Tensor, ended: list) -> None:
        at = {k: i for i, k in enumerate(keys)}
        got = held[torch.tensor([at[k] for k in ended], device=held.device)].tolist()
        self.stats.node_kv_tokens += sum(got)
        self.stats.node_kv_max = max([self.stats.node_kv_max, *got])
        self.stats.nodes_searched += len(got)

    @staticmethod
    def _tokens(pool: Rows | Packed | None, trees: dict) -> int:
        held = sum(c.width for t in trees.values() for c in t.ctx.values())
        return held + (pool.n * pool.width if pool is not None else 0)

    @staticmethod
    def _tail(tree, nid: int, parent: int) -> list[int]:
        """The tokens between the parent's context and the child's: the child's sentence (up to EOS)."""
        return tree.nodes[nid].response_ids[len(tree.nodes[parent].response_ids):]
