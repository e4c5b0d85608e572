"""`tree.engine: pool`: the group beam search of `search.py`, run as a continuously refilled pool of rows
with prefix reuse and the search on the device. Same trees as the one-node reference (`engine: reference`).

What differs from the reference path (`generate.TreeGenerator._grow` + `search.group_beam_search`), and
what does not:
  * the per-node search is the reference's step for step (HF group beam search semantics, the module
    docstring of `search.py`), vectorised over every node in the pool, each node at its own step `t`;
  * continuous refill: a node's 5 beam rows leave the pool when its search ends, and nodes of any
    prompt whose level was pruned join at the next step (no lockstep over a prompt batch). Bounded by
    `tree.prompt_batch` (prompts resident), `tree.batch_nodes` (nodes searching at once) and
    `tree.kv_budget` (cached tokens: pool rows x width + the kept contexts);
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

from training.csr.search import NEG, Hyp, SearchSpec
from training.csr.search import _collect as search_collect

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
class Search:
    """The group beam search state of every node in the pool, on the device; node i owns rows
    i*B .. i*B+B-1. Each step is `search.group_beam_search`'s step, with a per-node step counter."""

    def __init__(self, spec: SearchSpec, device, stats: Stats):
        self.spec, self.device, self.stats = spec, device, stats
        G, B = spec.num_groups, spec.num_beams
        self.G, self.B, self.S = G, B, B // G
        self.T = spec.max_new_tokens
        self.K = max(2, 1 + len(spec.stop_ids)) * self.S
        self.stop = torch.tensor(spec.stop_ids, dtype=torch.long, device=device)
        self.suppress = torch.tensor(spec.suppress_ids, dtype=torch.long, device=device)
        self.keys: list[Any] = []  # who each node is (the caller's handle)
        z = lambda *shape, **kw: torch.zeros(shape, device=device, **kw)  # noqa: E731
        G, S, T = self.G, self.S, self.T
        self.t = z(0, dtype=torch.long)
        self.run_score, self.run_tok = z(0, G, S), z(0, G, S, T, dtype=torch.long)
        self.fin_score, self.fin_tok = z(0, G, S), z(0, G, S, T, dtype=torch.long)
        self.fin_len, self.fin_set = z(0, G, S, dtype=torch.long), z(0, G, S, dtype=torch.bool)
        self.fin_ord = z(0, G, S, dtype=torch.long)
        self.open_ = z(0, G, dtype=torch.bool)

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, keys: list[Any]) -> None:
        m, G, S, T, d = len(keys), self.G, self.S, self.T, self.device
        run = torch.zeros((m, G, S), device=d)
        run[:, :, 1:] = NEG  # every group starts from its first beam only
        self.keys += keys
        self.t = torch.cat([self.t, torch.zeros(m, dtype=torch.long, device=d)])
        self.run_score = torch.cat([self.run_score, run])
        self.run_tok = torch.cat([self.run_tok, torch.zeros((m, G, S, T), dtype=torch.long, device=d)])
        self.fin_score = torch.cat([self.fin_score, torch.full((m, G, S), NEG, device=d)])
        self.fin_tok = torch.cat([self.fin_tok, torch.zeros((m, G, S, T), dtype=torch.long, device=d)])
        self.fin_len = torch.cat([self.fin_len, torch.zeros((m, G, S), dtype=torch.long, device=d)])
        self.fin_set = torch.cat([self.fin_set, torch.zeros((m, G, S), dtype=torch.bool, device=d)])
        self.fin_ord = torch.cat([self.fin_ord, torch.zeros((m, G, S), dtype=torch.long, device=d)])
        self.open_ = torch.cat([self.open_, torch.ones((m, G), dtype=torch.bool, device=d)])

    def _keep(self, idx: torch.Tensor) -> None:
        for name in ("t", "run_score", "run_tok", "fin_score", "fin_tok", "fin_len", "fin_set", "fin_ord", "open_"):
            setattr(self, name, getattr(self, name).index_select(0, idx))

    def step(self, logits: torch.Tensor, normalized: bool = False) -> tuple[list[tuple[Any, list[Hyp]]], torch.Tensor, torch.Tensor]:
        """One step of every node: (ended nodes with their hypotheses, cache rows to keep, their tokens).
        normalized=True: `logits` are log-probabilities already (training/csr/vllm_beam.py's top-N rows)."""
        spec, G, S, B, K, T = self.spec, self.G, self.S, self.B, self.K, self.T
        m = len(self)
        lp = logits.clone() if normalized else torch.log_softmax(logits, dim=-1)
        if self.suppress.numel():
            lp[:, self.suppress] = float("-inf")
        V = lp.shape[-1]
        lp = lp.view(m, G, S, V)
        t = self.t
        last = t + 1 >= T
        length = (t + 1).double()
        ar = torch.arange(m, device=self.device)
        chosen = torch.zeros((m, V), device=self.device)
        src = torch.zeros((m, G, S), dtype=torch.long, device=self.device)
        tok = torch.zeros((m, G, S), dtype=torch.long, device=self.device)
        order0 = t * K
        for g in range(G):
            scores = lp[:, g]
            if spec.diversity_penalty and g:
                scores = scores - spec.diversity_penalty * chosen[:, None, :]
            acc = (scores + self.run_score[:, g, :, None]).reshape(m, S * V)
            top_s, top_i = acc.topk(K, dim=-1)
            beam, token = top_i // V, top_i % V
            is_stop = torch.isin(token, self.stop)
            seqs = torch.take_along_dim(self.run_tok[:, g], beam[..., None], dim=1)
            seqs[ar, :, t] = token
            open_g = self.open_[:, g].clone()
            # the rules of search.group_beam_search, step for step (its comments say why)
            self._finish(g, top_s, seqs, is_stop & (torch.arange(K, device=self.device) < S), open_g,
                         length, order0)
            keep = torch.argsort(is_stop.to(torch.int8), dim=1, stable=True)[:, :S]
            self.run_score[:, g] = torch.take_along_dim(top_s, keep, 1)
            src[:, g] = g * S + torch.take_along_dim(beam, keep, 1)
            tok[:, g] = torch.take_along_dim(token, keep, 1)
            self.run_tok[:, g] = torch.take_along_dim(seqs, keep[..., None], 1)
            fed = torch.where(open_g[:, None], tok[:, g], torch.full_like(tok[:, g], spec.pad_id))
            chosen.scatter_add_(1, fed, torch.ones((m, S), device=self.device))
            full = self.fin_set[:, g].all(-1)
            best = top_s[:, 0] / (length ** spec.length_penalty).float()
            self.open_[:, g] = open_g & ~(full & (self.fin_score[:, g].min(-1).values >= best))
        if bool(self.stats.host(last.any())):
            # the length limit: the running beams of open groups become hypotheses too (nodes at T only)
            every = last[:, None].expand(m, S)
            for g in range(G):
                self._finish(g, self.run_score[:, g], self.run_tok[:, g], every, self.open_[:, g].clone(),
                             length, torch.full_like(t, T * K))
        still = self.open_.any(-1) & ~last
        self.t = t + 1
        still_h = self.stats.host(still)
        ended = []
        if not bool(still_h.all()):
            done = (~still).nonzero().squeeze(1)
            sc = self.stats.host(self.fin_score[done])
            ln = self.stats.host(self.fin_len[done])
            tk = self.stats.host(self.fin_tok[done])
            od = self.stats.host(self.fin_ord[done])
            for j, i in enumerate((~still_h).nonzero().squeeze(1).tolist()):
                ended.append((self.keys[i], search_collect(sc[j], tk[j], ln[j], od[j])))
        keep_nodes = still.nonzero().squeeze(1)
        rows = (keep_nodes[:, None] * B + src[keep_nodes].view(-1, B)).reshape(-1)
        toks = tok[keep_nodes].reshape(-1)
        if ended:
            self._keep(keep_nodes)
            self.keys = [k for k, s in zip(self.keys, still_h.tolist()) if s]
        self.stats.steps += 1
        return ended, rows, toks

    def _finish(self, g, top_s, seqs, hit, open_g, length, order0) -> None:
        """`search._finish` with a per-node length and insertion order."""
        S = self.S
        m, K = top_s.shape
        ok = hit & open_g[:, None]
        denom = (length ** self.spec.length_penalty).float()
        cand = torch.where(ok, top_s / denom[:, None], torch.full_like(top_s, NEG))
        merged_s = torch.cat([self.fin_score[:, g], cand], 1)
        merged_t = torch.cat([self.fin_tok[:, g], seqs], 1)
        merged_l = torch.cat([self.fin_len[:, g], length.long()[:, None].expand(m, K)], 1)
        merged_f = torch.cat([self.fin_set[:, g], ok], 1)
        merged_o = torch.cat([self.fin_ord[:, g], order0[:, None] + torch.arange(K, device=self.device)], 1)
        idx = torch.sort(merged_s, dim=-1, descending=True, stable=True).indices[:, :S]
        self.fin_score[:, g] = torch.take_along_dim(merged_s, idx, 1)
        self.fin_tok[:, g] = torch.take_along_dim(merged_t, idx[..., None], 1)
        self.fin_len[:, g] = torch.take_along_dim(merged_l, idx, 1)
        self.fin_set[:, g] = torch.take_along_dim(merged_f, idx, 1)
        self.fin_ord[:, g] = torch.take_along_dim(merged_o, idx, 1)

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

    @torch.inference_mode()
    def generate(self, records: Sequence[dict]) -> list[Any] | None:
        """The trees, in record order; None when this model's cache cannot be pooled (logged)."""
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
                for item in ready[:max(cfg.batch_nodes - len(search), 1)]:
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
            room = min(cfg.prompt_batch - len(trees), cfg.batch_nodes - len(search) - len(new_keys) - len(ready))
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
                self._ended(trees, done, ready, r, nid, hyps)
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

    def _ended(self, trees, done, ready, r: int, nid: int, hyps: list[Hyp]) -> None:
        st = trees[r]
        st.hyps[nid] = hyps
        self.gen.sentences_generated += len(hyps)
        if len(st.hyps) < len(st.level):
            return
        tree = st.prompt.tree
        for n in st.level:  # the reference's order: node ids are given in it
            self.gen._add_children(tree, n, st.hyps[n])
        st.prompt.active = self.gen._prune(tree, st.level)
        st.level, st.hyps = list(st.prompt.active), {}
        if not st.level:
            if self.cfg.junk_filter == "after_pruning":
                self.gen._drop_junk(tree)
            done[r] = tree
            del trees[r]
            return
        for c in st.level:
            ready.append((r, c, tree.nodes[c].parent))
        self._release(st, ready, r)

    @staticmethod
    def _release(st: _Tree, ready, r: int) -> None:
        """Drop context rows no waiting child and no searching node of this tree needs."""
        need = {par for rr, _, par in ready if rr == r} | set(st.level)
        for n in [n for n in st.ctx if n not in need]:
            del st.ctx[n]


# ------------------------------------------------------------------ comparing two engines' trees
@dataclass(frozen=True)
class Difference:
    """Where two trees of one prompt first part: `gap` is the score distance of the candidates that
    swapped there (sentence scores for a different sentence, cumulative scores for a different pruning)."""

    tree: str
    node: int
    what: str
    gap: float

    def near_tie(self, tol: float = 1e-5) -> bool:
        return self.gap <= tol


def first_difference(a, b, score_tol: float = 1e-5) -> Difference | None:
    """None when trees `a` and `b` agree (structure, token ids, statuses; scores within `score_tol`)."""
    for x, y in zip(a.nodes, b.nodes):
        if (x.parent, x.sentence_ids) != (y.parent, y.sentence_ids):
            sibs = [a.nodes[c].sentence_score for c in a.nodes[x.parent].children] if x.parent is not None else []
            gaps = [abs(s - t) for i, s in enumerate(sibs) for t in sibs[i + 1:]]
            gap = min([abs(x.sentence_score - y.sentence_score), *gaps])
            return Difference(a.id, x.id, "sentence", gap)
        if x.status != y.status:
            live = [a.nodes[c].lm_score for c in a.nodes[x.parent].children if c != x.id] if x.parent is not None else []
            gap = min((abs(x.lm_score - s) for s in live), default=float("inf"))
            return Difference(a.id, x.id, f"status {x.status} vs {y.status}", gap)
        if abs(x.sentence_score - y.sentence_score) > score_tol:
            return Difference(a.id, x.id, "score", abs(x.sentence_score - y.sentence_score))
    if len(a.nodes) != len(b.nodes):
        return Difference(a.id, min(len(a.nodes), len(b.nodes)), "node count", float("inf"))
    return None
