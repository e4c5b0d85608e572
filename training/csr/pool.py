"""`tree.engine: pool`: the group beam search of `search.py`, run as a continuously refilled pool of rows
with prefix reuse and the search on the device. Same trees as the one-node reference (`engine: reference`).

What differs from the reference path (`generate.TreeGenerator._grow` + `search.group_beam_search`), and
what does not:
  * the per-node search is the reference's own code (`search.GroupBeams.advance`, HF group beam search
    semantics: the module docstring of `search.py`), over every node in the pool, each at its own step `t`;
  * continuous refill: a node's 5 beam rows leave the pool when its search ends, and nodes of any
    prompt whose level was pruned join at the next step (no lockstep over a prompt batch). Bounded by
    `tree.prompt_batch` (prompts resident), `tree.batch_nodes` (nodes searching at once) and
    `tree.kv_budget` (cached tokens: pool rows x width + the kept contexts). These rules (`node_room`,
    `prompt_room`, `node_ended`) are also the vLLM driver's (`vllm_beam.grow_topn`), which has no KV budget;
  * prefix reuse: a prompt is prefilled once (its image through the vision tower once); a node's context
    KV (prompt + response so far, one row) is kept until its kept children are prefilled, and a child's
    context is its parent's plus one forward over the child's own sentence (batched with every other
    node that is ready at that step). Kept context rows are compacted (mask holes dropped), so a row
    costs its real length;
  * on the device: log-softmax, penalties, top-k and finishing are tensor ops where the rows live; the
    host reads one flag vector per step and the finished hypotheses (ids + scores) of ended nodes.
Where a cached prefix is computed in pieces (prompt, then sentence by sentence) instead of in one
prefill, floating-point rounding of the logits can differ in the last bits: a tree can then differ
only where two candidates' scores are within that rounding (tests/unit/test_csr_pool.py prints such cases).

Families whose cache is not made of plain `DynamicLayer`s (sliding windows, linear attention, static
caches) cannot have rows cut and stacked here: the generator falls back to the reference path and
says so in the log.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from training.csr.search import GroupBeams, Hyp, SearchSpec

log = logging.getLogger(__name__)


@dataclass
class Stats:
    """Engine-side counters (the bench adds forward hooks for forwards, rows and vision passes)."""

    steps: int = 0
    host_bytes: int = 0
    prefill_tokens: int = 0  # real (unmasked) tokens fed by prefill forwards (prompts + sentences)
    prompt_tokens: int = 0   # of which prompt prefills
    nodes_prefilled: int = 0
    peak_tokens: int = 0

    def host(self, t: torch.Tensor) -> torch.Tensor:
        self.host_bytes += t.numel() * t.element_size()
        return t.cpu()


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


def _cache_rows(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def unsupported(cache) -> str | None:
    """Why this cache's rows cannot be cut, padded and stacked here (None: they can)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    if cache is None:
        return "no KV cache on the model's own output"
    if type(cache) is not DynamicCache:
        return f"cache class {type(cache).__name__}"
    kinds = {type(layer).__name__ for layer in cache.layers if type(layer) is not DynamicLayer}
    return f"cache layers {sorted(kinds)}" if kinds else None


# ------------------------------------------------------------------ the model calls
class Runner:
    """Prefills and decode steps of one model over `Rows` (positions and masks as `search._Batch`)."""

    def __init__(self, model, spec: SearchSpec, stats: Stats):
        self.model, self.spec, self.stats = model, spec, stats
        self.device = next(model.parameters()).device
        self.fill = dict(spec.response_fill)
        self.seq_keys: list[str] = []

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
@dataclass
class _Tree:
    prompt: Any                       # generate._Prompt
    level: list[int]                  # nodes of the level being searched, in the reference's order
    hyps: dict[int, list[Hyp]] = field(default_factory=dict)
    ctx: dict[int, Rows] = field(default_factory=dict)  # context rows of nodes whose children may still need them


def _config_bytes_per_token(model) -> int | None:
    """Bytes one cached token takes (keys + values of every layer), from the text config; None if unsure."""
    try:
        c = model.config.get_text_config(decoder=True)
        head = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
        return int(c.num_hidden_layers * 2 * kv_heads * head * model.dtype.itemsize)
    except (AttributeError, TypeError, ZeroDivisionError):
        return None


def kv_budget_tokens(value, model, bytes_per_token: int) -> int:
    """`tree.kv_budget` in cached tokens: an int as given; `auto` = half the free device memory (CUDA),
    else no bound (2**40)."""
    if value != "auto":
        return int(value)
    device = next(model.parameters()).device
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return max(int(free * 0.5) // max(bytes_per_token, 1), 1)
    return 2 ** 40


class PoolEngine:
    """Grows trees like `TreeGenerator._grow` (same node ids, statuses and pruning) over a refilled pool."""

    def __init__(self, gen):
        self.gen, self.cfg, self.spec = gen, gen.cfg, gen.spec
        self.model = gen.vlm.model
        self.stats = Stats()
        self.runner = Runner(self.model, self.spec, self.stats)
        self.device = self.runner.device

    def generate(self, records: Sequence[dict], progress: bool = False) -> list[Any] | None:
        """The trees, in record order; None when this model's cache cannot be pooled (logged).
        progress=True: a bar of trees done / total."""
        self._bar, self._progress = None, progress
        try:
            return self._generate(records)
        finally:
            if self._bar is not None:
                self._bar.close()

    def _advance(self, done: int, total: int) -> None:
        """The bar, made once the first prompts were prefilled (a model that falls back shows none here)."""
        if self._bar is None:
            from evalsuite.progress import progress_bar

            self._bar = progress_bar(total=total, desc="csr trees", unit="tree", disable=not self._progress)
        self._bar.update(done - self._bar.n)

    @torch.inference_mode()
    def _generate(self, records: Sequence[dict]) -> list[Any] | None:
        cfg, B = self.cfg, self.spec.num_beams
        waiting = list(range(len(records)))
        trees: dict[int, _Tree] = {}
        done: dict[int, Any] = {}
        search = Search(self.spec, self.device, self.stats)
        pool: Rows | None = None
        logits: torch.Tensor | None = None
        ready: list[tuple[int, int, int]] = []  # (record, node, parent) whose context needs its sentence
        # `auto` needs the bytes of one cached token: from the text config, else known after the first
        # prefill (which then takes one prompt alone)
        bpt = _config_bytes_per_token(self.model)
        budget = kv_budget_tokens(cfg.kv_budget, self.model, bpt) if bpt or cfg.kv_budget != "auto" else None
        if budget is not None:
            log.info("tree.engine pool: KV budget %s (kv_budget %s)",
                     "unbounded" if budget >= 2 ** 40 else f"{budget} tokens", cfg.kv_budget)
        starts: dict[int, Any] = {}
        while waiting or ready or len(search):
            new_rows, new_logits, new_keys = [], [], []
            # The budget is checked against a bound of what the pool will hold: every row padded to the
            # widest and grown by max_new_tokens, plus the kept context rows.
            held = sum(c.width for t in trees.values() for c in t.ctx.values())
            n_rows, width = (pool.n, pool.width) if pool is not None else (0, 0)
            bound = lambda rows, w, kept: rows * (w + self.spec.max_new_tokens) + kept  # noqa: E731
            # 1. nodes whose parent's level was pruned: one forward over their sentences
            if ready:
                batch = []
                for item in ready[:node_room(cfg, len(search))]:
                    r, nid, par = item
                    w = trees[r].ctx[par].width + len(self._tail(trees[r].prompt.tree, nid, par))
                    if bound(n_rows + B, max(width, w), held + w) > budget and (batch or len(search)):
                        break  # wait for rows to leave (one node always goes when nothing else runs)
                    batch.append(item)
                    n_rows, width, held = n_rows + B, max(width, w), held + w
                ready = ready[len(batch):]
                if batch:
                    parents = [trees[r].ctx[par] for r, _, par in batch]
                    tails = [self._tail(trees[r].prompt.tree, nid, par) for r, nid, par in batch]
                    ctx, lg = self.runner.extend(parents, tails)
                    for j, (r, nid, par) in enumerate(batch):
                        trees[r].ctx[nid] = ctx[j]
                        new_rows.append(ctx[j].repeat(B))
                        new_logits.append(lg[j:j + 1].repeat_interleave(B, 0))
                        new_keys.append((r, nid))
                    for r in {r for r, _, _ in batch}:
                        self._release(trees[r], ready, r)
            # 2. prompts: while fewer than prompt_batch are resident, nodes fit batch_nodes and tokens the budget
            room = prompt_room(cfg, len(trees), len(search), len(new_keys), len(ready))
            take = []
            while waiting and len(take) < (room if budget is not None else 1):
                r = waiting[0]
                if r not in starts:
                    starts[r] = self.gen._start(records[r])
                w = len(starts[r].tree.prompt_ids)
                if budget is not None and (take or len(search) or new_keys) and bound(n_rows + B, max(width, w), held + w) > budget:
                    break
                take.append(waiting.pop(0))
                n_rows, width, held = n_rows + B, max(width, w), held + w
            if take:
                ps = [starts.pop(r) for r in take]
                ctx, lg, why = self.runner.prompts([p.tree.prompt_ids for p in ps], [p.features for p in ps])
                if why is not None:
                    log.warning("tree.engine pool: %s cannot be cut and stacked (%s); falling back to the "
                                "reference path", type(self.model).__name__, why)
                    return None
                if budget is None:  # `auto`
                    bpt = sum(k.shape[1] * k.shape[3] * k.element_size() * 2 for k, _ in ctx[0].kv)
                    budget = kv_budget_tokens(cfg.kv_budget, self.model, bpt)
                    log.info("tree.engine pool: KV budget %d tokens (%d bytes per token)", budget, bpt)
                for j, (r, p) in enumerate(zip(take, ps)):
                    trees[r] = _Tree(prompt=p, level=[0], ctx={0: ctx[j]})
                    new_rows.append(ctx[j].repeat(B))
                    new_logits.append(lg[j:j + 1].repeat_interleave(B, 0))
                    new_keys.append((r, 0))
            if new_keys:
                pool = stack(([pool] if pool is not None else []) + new_rows, consume=True)
                logits = torch.cat(([logits] if logits is not None else []) + new_logits)
                search.add(new_keys)
            self.stats.peak_tokens = max(self.stats.peak_tokens, self._tokens(pool, trees))
            # 3. one search step over every node, then one forward over the rows that go on
            ended, rows, toks = search.step(logits)
            for (r, nid), hyps in ended:
                node_ended(self.gen, trees, done, ready, r, nid, hyps)
            self._advance(len(done), len(records))
            if len(search):
                pool, logits = self.runner.step(pool.select(rows), toks)
                self.stats.peak_tokens = max(self.stats.peak_tokens, self._tokens(pool, trees))
            else:
                pool, logits = None, None
        return [done[i] for i in range(len(records))]

    @staticmethod
    def _tokens(pool: Rows | None, trees: dict) -> int:
        held = sum(c.width for t in trees.values() for c in t.ctx.values())
        return held + (pool.n * pool.width if pool is not None else 0)

    @staticmethod
    def _tail(tree, nid: int, parent: int) -> list[int]:
        """The tokens between the parent's context and the child's: the child's sentence (up to EOS)."""
        return tree.nodes[nid].response_ids[len(tree.nodes[parent].response_ids):]

    @staticmethod
    def _release(st: _Tree, ready, r: int) -> None:
        """Drop context rows no waiting child and no searching node of this tree needs."""
        need = {par for rr, _, par in ready if rr == r} | set(st.level)
        for n in [n for n in st.ctx if n not in need]:
            del st.ctx[n]


# ------------------------------------------------------------------ scheduling rules (shared with vllm_beam.grow_topn)
def node_room(cfg, searching: int) -> int:
    """How many ready nodes may join the search now: up to `tree.batch_nodes` searching (one when none is).
    (Not one at every step: with `batch_nodes` searching that would let more search, step after step.)"""
    return max(cfg.batch_nodes - searching, 0 if searching else 1)


def prompt_room(cfg, resident: int, searching: int, joining: int, ready: int) -> int:
    """How many waiting prompts may start now: fewer than `tree.prompt_batch` resident, and their roots within
    `tree.batch_nodes` next to the nodes searching, joining and still ready."""
    return min(cfg.prompt_batch - resident, cfg.batch_nodes - searching - joining - ready)


def node_ended(gen, trees: dict, done: dict, ready: list, r: int, nid: int, hyps: list[Hyp]) -> None:
    """Node `nid` of prompt `r` ended its search with `hyps`. Once its whole level has, the level is grown and
    pruned as `TreeGenerator._grow` does (same node ids, statuses); its kept nodes become `ready` (record,
    node, parent), or the tree is done (junk dropped under `junk_filter: after_pruning`) and leaves `trees`."""
    st = trees[r]
    st.hyps[nid] = hyps
    gen.sentences_generated += len(hyps)
    if len(st.hyps) < len(st.level):
        return
    tree = st.prompt.tree
    for n in st.level:  # the reference's order: node ids are given in it
        gen._add_children(tree, n, st.hyps[n])
    st.prompt.active = gen._prune(tree, st.level)
    st.level, st.hyps = list(st.prompt.active), {}
    if not st.level:
        if gen.cfg.junk_filter == "after_pruning":
            gen._drop_junk(tree)
        done[r] = tree
        del trees[r]
        return
    for c in st.level:
        ready.append((r, c, tree.nodes[c].parent))
    PoolEngine._release(st, ready, r)


# ------------------------------------------------------------------ comparing two engines' trees
@dataclass(frozen=True)
class Difference:
    """Where two trees of one prompt first part. `gap` is the score distance of the two candidates that
    swapped there: for a different sentence, the sentence score of tree a's node and of the candidate that
    took its place in tree b; for a different pruning, the cumulative scores of the node and of the node
    whose pruning went the other way (`other`), the larger of the two trees' distances. Anything that is
    not a swap of two scored candidates (a different child count, a different final/junk status, a tree
    missing) has gap inf: it is never a near-tie."""

    tree: str
    node: int
    what: str
    gap: float
    other: int | None = None

    def near_tie(self, tol: float = 1e-5) -> bool:
        return self.gap <= tol


def _levels(tree) -> dict[int, list]:
    out: dict[int, list] = {}
    for n in tree.nodes:
        out.setdefault(n.depth, []).append(n)
    return out


def first_difference(a, b, score_tol: float = 1e-5) -> Difference | None:
    """None when trees `a` and `b` agree (structure, token ids, statuses; scores within `score_tol`).

    Level by level (a level's sentences decide its pruning, and its pruning the next level): first the
    level's sentences in node order, then its statuses, then its scores."""
    la, lb = _levels(a), _levels(b)
    for depth in sorted(set(la) | set(lb)):
        xs, ys = la.get(depth, []), lb.get(depth, [])
        for x, y in zip(xs, ys):
            if (x.parent, x.sentence_ids) != (y.parent, y.sentence_ids):
                # a different child count shifts later siblings under another parent: not a swap
                gap = abs(x.sentence_score - y.sentence_score) if x.parent == y.parent else float("inf")
                return Difference(a.id, x.id, "sentence", gap)
        if len(xs) != len(ys):
            return Difference(a.id, min(len(a.nodes), len(b.nodes)), "node count", float("inf"))
        for x, y in zip(xs, ys):
            if x.status != y.status:
                return _status_difference(a, b, xs, ys, x, y)
        for x, y in zip(xs, ys):
            if abs(x.sentence_score - y.sentence_score) > score_tol:
                return Difference(a.id, x.id, "score", abs(x.sentence_score - y.sentence_score))
    return None


def _status_difference(a, b, xs, ys, x, y) -> Difference:
    """A node kept in one tree and pruned in the other swapped with a node of its level whose pruning
    went the other way; the nearest such node in cumulative score is the one that took its place."""
    what = f"status {x.status} vs {y.status}"
    if (x.status == "pruned") == (y.status == "pruned"):
        return Difference(a.id, x.id, what, float("inf"))  # not decided by pruning
    pruned_in_a = x.status == "pruned"
    others = [(u, v) for u, v in zip(xs, ys)
              if (u.status == "pruned") != (v.status == "pruned") and (u.status == "pruned") != pruned_in_a]
    if not others:
        return Difference(a.id, x.id, what, float("inf"))
    gap, z = min((max(abs(x.lm_score - u.lm_score), abs(y.lm_score - v.lm_score)), u.id) for u, v in others)
    return Difference(a.id, x.id, what, gap, other=z)


def differences(a_trees: Sequence, b_trees: Sequence, score_tol: float = 1e-5) -> list[Difference]:
    """Every differing tree of two runs over the same prompts, each with its first difference; a prompt
    whose tree is in one run only counts too (gap inf)."""
    b_by_id = {t.id: t for t in b_trees}
    a_ids = {t.id for t in a_trees}
    out = []
    for t in a_trees:
        if t.id not in b_by_id:
            out.append(Difference(t.id, 0, "tree missing in b", float("inf")))
        elif (d := first_difference(t, b_by_id[t.id], score_tol)) is not None:
            out.append(d)
    out += [Difference(t.id, 0, "tree missing in a", float("inf")) for t in b_trees if t.id not in a_ids]
    return out
