"""CSR's search trees (docs/csr-method.md §2): the tree itself and its rules are `training.csr.rules`, the
engines that grow it `training.csr.engines` (`make_tree_engine(cfg.tree, vlm, image_root).grow(records)`).
Here: `TreeGenerator`, that factory and its engine in one object, and reading / writing trees.

Every engine gives the same trees whatever its bounds: with `batch_nodes=1, prompt_batch=1` the reference
engine runs one prompt and one node per call, as the released sampler does (tests/unit/test_csr_generate.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

from training.csr.config import TreeConfig
from training.csr.rules import (Node, Prompt, Stats, Tree, TreeRules, encode_prompt, period_id,  # noqa: F401
                                response_fill, sentence_end_ids)


class TreeGenerator:
    """The engine `make_tree_engine` picks for `cfg` (and its rules), as one object: `generate(records)` grows
    the trees, `spec` is the per-node search, `stats` what the engine counted (`stats.sentences`, and the
    pool's steps, host reads and peak KV tokens). `expand`: see `make_tree_engine`."""

    def __init__(self, vlm, cfg: TreeConfig, image_root: str | Path, sampler=None, expand=None):
        from training.csr.engines import make_tree_engine

        self.engine = make_tree_engine(cfg, vlm, image_root, sampler=sampler, expand=expand)
        self.rules: TreeRules = self.engine.rules
        self.vlm, self.cfg, self.spec = vlm, cfg, self.rules.spec

    @property
    def stats(self) -> Stats:
        return self.engine.stats

    def generate(self, records: Sequence[dict], progress: bool = True) -> list[Tree]:
        return self.engine.grow(records, progress=progress)


def write_trees(path: str | Path, trees: Iterable[Tree]) -> Path:
    from evalsuite.files import write_jsonl_atomic

    return write_jsonl_atomic(path, (t.to_dict() for t in trees))


def read_trees(path: str | Path) -> list[Tree]:
    import json

    with open(path) as fh:
        return [Tree.from_dict(json.loads(line)) for line in fh if line.strip()]
