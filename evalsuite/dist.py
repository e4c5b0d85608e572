"""Where this process sits in a data-parallel run, resolved once at an entry point and passed down.

    dist = Dist.current()          # torchrun / accelerate launch set RANK, WORLD_SIZE, LOCAL_RANK
    if dist.is_main: write(...)

Nothing below the entry points reads the launcher's environment variables: they receive a `Dist`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def current(cls) -> "Dist":
        """From torch.distributed if it is initialised, else the launcher's environment, else single-process."""
        import sys

        if "torch" in sys.modules:
            import torch.distributed as td

            if td.is_available() and td.is_initialized():
                return cls(td.get_rank(), td.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))
        env = os.environ
        return cls(int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0)))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def device(self, requested: str | None) -> str | None:
        """The device this rank runs on: `requested`, else under data parallelism with GPUs its own GPU
        (None = the loader's choice: cuda if available, else cpu)."""
        if requested or not self.distributed:
            return requested
        import torch

        return f"cuda:{self.local_rank}" if torch.cuda.is_available() else None

    def shard(self, items: list) -> list:
        """This rank's share of `items` (every world_size-th, starting at rank), order kept."""
        return items[self.rank::self.world_size]
