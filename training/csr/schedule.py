"""The scheduling both refill engines share (the pool and the vLLM driver; training/csr/engines.py): the caps,
the KV budget in tokens, and `Refill`, which admits prompts and nodes while the budget allows."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

from training.csr.rules import Prompt, Stats, Tree, TreeRules

log = logging.getLogger(__name__)

NO_CAP = 1 << 62
# `kv_budget: auto` off CUDA: the cache a CPU run may hold (host memory is not probed: it is shared with
# everything else the run holds, and a CPU run is a small one).
CPU_KV_BYTES = 8 << 30


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
