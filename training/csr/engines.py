"""CSR's tree engines behind one interface (`tree.engine`; docs/csr-engine.md):

    engine = make_tree_engine(cfg.tree, vlm, image_root)        # or sampler=VllmSampler for tree.engine vllm
    trees = engine.grow(records)                                 # trees in record order; engine.stats

Every engine grows the trees of `training.csr.rules.TreeRules` (same node ids, statuses, pruning); they
differ only in when each node is searched and on what:
  * `ReferenceEngine`: levels in lockstep over a batch of prompts, nodes searched in chunks, every node
    prefilled from its prompt (`search.group_beam_search` / `search.sample_search`, or an injected expander);
  * `training.csr.pool.PoolEngine`: the continuous refill (`Refill`) over a pool of cached rows;
  * `training.csr.vllm_beam.VllmTreeEngine`: the same refill, each search step one vLLM call.

What bounds the work resident is memory: `tree.kv_budget` (cached tokens; `auto` = half the free device
memory on CUDA, `CPU_KV_BYTES` of cache on CPU; on vLLM the worker's own KV capacity when it reports one).
`tree.prompt_batch` (prompts resident) and `tree.batch_nodes` (nodes searching at once) are optional caps on
top (None: no cap). None of the bounds changes a tree.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from training.csr.config import TreeConfig
from training.csr.rules import Prompt, Stats, Tree, TreeRules

log = logging.getLogger(__name__)

NO_CAP = 1 << 62
# `kv_budget: auto` off CUDA: the cache a CPU run may hold (host memory is not probed: it is shared with
# everything else the run holds, and a CPU run is a small one).
CPU_KV_BYTES = 8 << 30

Expander = Callable[[list[tuple[Prompt, int]]], list[list[Any]]]  # (prompt, node) chunk -> per node its Hyps, best first


class TreeEngine(Protocol):
    """Grows whole trees of prompt records {id, image, question}."""

    rules: TreeRules
    stats: Stats

    def grow(self, records: Sequence[dict], progress: bool = True) -> list[Tree]:
        """The trees of `records`, in record order (progress: a bar of trees or batches done)."""
        ...


def cap(value: int | None) -> int:
    """A count cap of `tree.prompt_batch` / `tree.batch_nodes` (None: no cap)."""
    return NO_CAP if value is None else value


def bytes_per_token(model) -> int | None:
    """Bytes one cached token takes (keys + values of every layer), from the text config; None if unsure."""
    try:
        c = model.config.get_text_config(decoder=True)
        head = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
        return int(c.num_hidden_layers * 2 * kv_heads * head * model.dtype.itemsize)
    except (AttributeError, TypeError, ZeroDivisionError):
        return None


def kv_budget_tokens(value, model, bpt: int) -> int:
    """`tree.kv_budget` in cached tokens: an int as given; `auto` = half the free device memory (CUDA), else
    `CPU_KV_BYTES` of cache."""
    if value != "auto":
        return int(value)
    import torch

    device = next(model.parameters()).device
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return max(int(free * 0.5) // max(bpt, 1), 1)
    return max(CPU_KV_BYTES // max(bpt, 1), 1)


# ------------------------------------------------------------------ the reference engine
def hf_expander(rules: TreeRules) -> Expander:
    """Each node of a chunk searched from its prompt on the loaded HF model (`search.py`)."""

    def expand(chunk):
        from training.csr.search import group_beam_search, sample_search

        cfg, model = rules.cfg, rules.vlm.model
        contexts = [p.tree.prompt_ids + p.tree.nodes[nid].response_ids for p, nid in chunk]
        features = [p.features for p, _ in chunk]
        if cfg.expander == "group_beam":
            return group_beam_search(model, contexts, features, rules.spec)
        keys = [f"{p.tree.id}/{nid}" for p, nid in chunk]
        return sample_search(model, contexts, features, rules.spec, cfg.num_samples, keys,
                             seed=cfg.seed, temperature=cfg.temperature, top_p=cfg.top_p)

    return expand


class ReferenceEngine:
    """Levels in lockstep over a batch of prompts, the level's nodes searched in chunks by `expand`. A batch
    is `tree.prompt_batch` prompts and a chunk `tree.batch_nodes` nodes; where either is None, as many as
    `budget` cached tokens allow (a node's search holds num_beams rows of its context + max_new_tokens;
    budget None: no bound)."""

    def __init__(self, rules: TreeRules, expand: Expander | None = None, budget: int | None = None,
                 stats: Stats | None = None):
        self.rules, self.cfg = rules, rules.cfg
        self.stats = stats if stats is not None else Stats()
        self.expand = expand if expand is not None else hf_expander(rules)
        self.budget = budget

    def _cost(self, contexts: list[int]) -> int:
        """Tokens a chunk searching these contexts holds: width x max_new_tokens more, every row padded to the widest."""
        return len(contexts) * self.cfg.width * (max(contexts) + self.cfg.max_new_tokens)

    def _fits(self, lengths: list[int], n: int, count_cap: int | None) -> bool:
        if count_cap is not None:
            return n < count_cap
        return self.budget is None or self._cost(lengths) <= self.budget

    def grow(self, records: Sequence[dict], progress: bool = True) -> list[Tree]:
        from evalsuite.progress import progress_bar

        trees: list[Tree] = []
        bar = progress_bar(total=len(records), desc="csr trees", unit="tree", disable=not progress or len(records) < 2)
        i, pending = 0, None
        try:
            while i < len(records) or pending is not None:
                batch: list[Prompt] = []
                while pending is not None or i < len(records):
                    if pending is None:
                        pending, i = self.rules.start(records[i]), i + 1
                    lengths = [len(p.tree.prompt_ids) for p in batch + [pending]]
                    if batch and not self._fits(lengths, len(batch), self.cfg.prompt_batch):
                        break
                    batch.append(pending)
                    pending = None
                trees.extend(self._grow(batch))
                bar.update(len(batch))
        finally:
            bar.close()
        return trees

    def _grow(self, prompts: list[Prompt]) -> list[Tree]:
        rules = self.rules
        while any(p.active for p in prompts):
            work = [(p, nid) for p in prompts for nid in p.active]
            lo = 0
            while lo < len(work):
                hi = lo + 1
                while hi < len(work):
                    lengths = [len(p.tree.prompt_ids) + len(p.tree.nodes[n].response_ids) for p, n in work[lo:hi + 1]]
                    if not self._fits(lengths, hi - lo, self.cfg.batch_nodes):
                        break
                    hi += 1
                chunk = work[lo:hi]
                out = self.expand(chunk)
                self.stats.sentences += sum(len(h) for h in out)
                for (p, nid), hyps in zip(chunk, out):
                    rules.add_children(p.tree, nid, hyps)
                lo = hi
            for p in prompts:
                p.active = rules.prune(p.tree, p.active)
        return [rules.finish(p.tree) for p in prompts]


# ------------------------------------------------------------------ the continuous refill (pool and vLLM)
@dataclass
class Resident:
    """A prompt whose tree is growing in a refill engine."""

    prompt: Prompt
    level: list[int]                                    # nodes of the level being searched, in the reference's order
    hyps: dict[int, list] = field(default_factory=dict)  # their hypotheses, as their searches end
    ctx: dict[int, Any] = field(default_factory=dict)    # pool: context rows of nodes whose children may still need them


class Refill:
    """The scheduling state both refill engines run (`pool.PoolEngine`, `vllm_beam.VllmTreeEngine`): prompts
    waiting, resident (`trees`), done; `ready` = (record, node, parent) of kept nodes whose search has not
    started. A prompt's level is grown and pruned by the rules as soon as its last node's search ended, so
    a node's hypotheses never depend on which other nodes searched beside it: the reference's trees."""

    def __init__(self, rules: TreeRules, stats: Stats, records: Sequence[dict]):
        self.rules, self.cfg, self.stats, self.records = rules, rules.cfg, stats, records
        self.waiting = list(range(len(records)))
        self.trees: dict[int, Resident] = {}
        self.done: dict[int, Tree] = {}
        self.ready: list[tuple[int, int, int]] = []

    def busy(self, searching: int) -> bool:
        return bool(self.waiting or self.ready or searching)

    def node_room(self, searching: int) -> int:
        """How many ready nodes may join the search now under `tree.batch_nodes` (one when none searches).
        (Not one at every step: with `batch_nodes` searching that would let more search, step after step.)"""
        return max(cap(self.cfg.batch_nodes) - searching, 0 if searching else 1)

    def prompt_room(self, searching: int, joining: int) -> int:
        """How many waiting prompts may start now: under `tree.prompt_batch` resident, and their roots under
        `tree.batch_nodes` next to the nodes searching, joining and still ready."""
        return max(min(cap(self.cfg.prompt_batch) - len(self.trees),
                       cap(self.cfg.batch_nodes) - searching - joining - len(self.ready)), 0)

    def start(self, r: int, prompt: Prompt | None = None) -> Resident:
        """Prompt `r` becomes resident (`prompt`: its tree already started), its root the level searched."""
        self.trees[r] = Resident(prompt=prompt if prompt is not None else self.rules.start(self.records[r]), level=[0])
        return self.trees[r]

    def node_ended(self, r: int, nid: int, hyps: list) -> None:
        """Node `nid` of prompt `r` ended its search. Once its whole level has, the level is grown and pruned;
        its kept nodes become `ready`, or the tree is finished and leaves `trees`."""
        st = self.trees[r]
        st.hyps[nid] = hyps
        self.stats.sentences += len(hyps)
        if len(st.hyps) < len(st.level):
            return
        tree = st.prompt.tree
        st.prompt.active = self.rules.grow_level(tree, st.level, st.hyps)
        st.level, st.hyps = list(st.prompt.active), {}
        if not st.level:
            self.done[r] = self.rules.finish(tree)
            del self.trees[r]
            return
        self.ready += [(r, c, tree.nodes[c].parent) for c in st.level]
        self.release(r)

    def release(self, r: int) -> None:
        """Drop context rows no waiting child and no searching node of prompt `r` needs."""
        st = self.trees[r]
        need = {par for rr, _, par in self.ready if rr == r} | set(st.level)
        for n in [n for n in st.ctx if n not in need]:
            del st.ctx[n]

    def result(self) -> list[Tree]:
        return [self.done[i] for i in range(len(self.records))]


# ------------------------------------------------------------------ the factory
def make_tree_engine(cfg: TreeConfig, vlm, image_root: str | Path, sampler=None,
                     expand: Expander | None = None) -> TreeEngine:
    """The engine `cfg.engine` names, for `cfg.expander`:
    * `vllm` (needs `sampler`, a `training.csr.vllm_expand.VllmSampler`): group_beam on
      `vllm_beam.VllmTreeEngine`; the sampling expander on the reference engine, each chunk one vLLM call;
    * `pool`: group_beam on `pool.PoolEngine` (which grows on the reference engine, and says so, where the
      model's cache cannot be pooled); the sampling expander on the reference engine (said in the log);
    * `reference`.
    `expand` replaces the reference engine's search (scripted searches in tests; benches' stand-ins)."""
    rules = TreeRules(vlm, cfg, image_root)
    stats = Stats()
    if cfg.engine == "vllm":
        if sampler is None:
            raise ValueError("tree.engine vllm needs a VllmSampler (training/csr/vllm_expand.py)")
        if cfg.expander == "group_beam" and expand is None:
            from training.csr.vllm_beam import VllmTreeEngine

            return VllmTreeEngine(rules, sampler, stats)
        return ReferenceEngine(rules, expand or sampler.expander(rules), budget=sampler.kv_tokens(), stats=stats)
    bpt = bytes_per_token(vlm.model) if getattr(vlm, "model", None) is not None else None
    budget = kv_budget_tokens(cfg.kv_budget, vlm.model, bpt) if bpt else None
    if cfg.engine == "pool" and cfg.expander == "group_beam" and expand is None:
        from training.csr.pool import PoolEngine

        return PoolEngine(rules, stats, fallback=ReferenceEngine(rules, budget=budget, stats=stats))
    if cfg.engine == "pool":
        log.info("tree.engine pool: the %s expander runs the reference path", cfg.expander)
    return ReferenceEngine(rules, expand, budget=budget, stats=stats)
