"""CSR's tree engines behind one interface (`tree.engine`; docs/csr-engine.md):

    engine = make_tree_engine(cfg.tree, vlm, image_root)        # or sampler=VllmSampler for tree.engine vllm
    trees = engine.grow(records)                                 # trees in record order; engine.stats

Every engine grows the trees of `training.csr.rules.TreeRules` (same node ids, statuses, pruning); they
differ only in when each node is searched and on what:
  * `ReferenceEngine`: levels in lockstep over a batch of prompts, nodes searched in chunks, every node
    prefilled from its prompt (`search.group_beam_search` / `search.sample_search`, or an injected expander);
  * `training.csr.pool.PoolEngine`: the continuous refill (`training.csr.schedule.Refill`) over a pool of cached rows;
  * `training.csr.vllm_beam.VllmTreeEngine`: the same refill, each search step one vLLM call.

What bounds the work resident is memory: `tree.kv_budget` (cached tokens; `auto` = half the free device
memory on CUDA, `CPU_KV_BYTES` of cache on CPU; on vLLM the worker's own KV capacity when it reports one).
`tree.prompt_batch` (prompts resident) and `tree.batch_nodes` (nodes searching at once) are optional caps on
top (None: no cap). None of the bounds changes a tree.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from training.csr.config import TreeConfig
from training.csr.rules import Prompt, Stats, Tree, TreeRules
from training.csr.schedule import bytes_per_token, kv_budget_tokens

log = logging.getLogger(__name__)


Expander = Callable[[list[tuple[Prompt, int]]], list[list[Any]]]  # (prompt, node) chunk -> per node its Hyps, best first


class TreeEngine(Protocol):
    """Grows whole trees of prompt records {id, image, question}."""

    rules: TreeRules
    stats: Stats

    def grow(self, records: Sequence[dict], progress: bool = True) -> list[Tree]:
        """The trees of `records`, in record order (progress: a bar of trees or batches done)."""
        ...


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
        return sample_search(model, contexts, features, rules.spec, cfg.num_samples, keys, seed=cfg.seed)

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
