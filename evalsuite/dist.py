"""Where this process sits in a data-parallel run, resolved once at an entry point and passed down.

    dist = Dist.current()          # torchrun / accelerate launch set RANK, WORLD_SIZE, LOCAL_RANK
    if dist.is_main: write(...)

Nothing below the entry points reads the launcher's environment variables: they receive a `Dist`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

_GLOO_GROUP = None


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

    # ------------------------------------------------- collectives (no-ops in a single process)
    def init_group(self, device: str | None = None, timeout=None) -> bool:
        """Join the launcher's process group if nobody has yet (gloo on CPU, nccl on this rank's GPU);
        `timeout` (a datetime.timedelta) bounds every collective, e.g. a barrier where the other ranks
        wait while rank 0 alone works. Returns whether this call initialised the group."""
        return init_process_group(device, timeout) if self.distributed else False

    def barrier(self) -> None:
        """Wait until every rank gets here (a no-op in one process; the group must be initialised)."""
        if self.distributed:
            import torch.distributed as td

            td.barrier()

    def _object_group(self):
        """A gloo group for Python objects (object collectives on NCCL need CUDA tensors), built once."""
        import torch.distributed as td

        global _GLOO_GROUP
        if td.get_backend() == "gloo":
            return None
        if _GLOO_GROUP is None:  # every rank reaches this in the same collective, so all create it
            _GLOO_GROUP = td.new_group(backend="gloo")
        return _GLOO_GROUP

    def gather(self, obj) -> list | None:
        """[obj of rank 0, obj of rank 1, ...] on rank 0, None on the others; [obj] in one process."""
        if not self.distributed:
            return [obj]
        import torch.distributed as td

        out = [None] * self.world_size if self.is_main else None
        td.gather_object(obj, out, dst=0, group=self._object_group())
        return out

    def broadcast(self, obj):
        """Rank 0's `obj` on every rank (what rank 0 decided, e.g. a run id)."""
        if not self.distributed:
            return obj
        import torch.distributed as td

        box = [obj]
        td.broadcast_object_list(box, src=0, group=self._object_group())
        return box[0]

    def reduce_max(self, value: int, device=None) -> int:
        """The largest `value` over all ranks (an OR of flags), every rank gets it; `device`: where the
        group's backend takes tensors (the trainer's device: cuda under NCCL)."""
        if not self.distributed:
            return value
        import torch
        import torch.distributed as td

        box = torch.tensor([value], dtype=torch.int64, device=device)
        td.all_reduce(box, op=td.ReduceOp.MAX)
        return int(box.item())

    def unshard(self, parts: list[list]) -> list:
        """Inverse of `shard` on rank 0: the per-rank lists gathered back into the original order."""
        out: list = []
        for i in range(max((len(p) for p in parts), default=0)):
            out.extend(p[i] for p in parts if i < len(p))
        return out

def init_process_group(device: str | None = None, timeout=None) -> bool:
    """Join the launcher's process group when started by torchrun or `accelerate launch` (WORLD_SIZE > 1,
    MASTER_ADDR set) and nothing has initialised one yet: gloo on CPU, gloo + nccl when this rank has a
    GPU (and `device` is not cpu), with `cuda:<LOCAL_RANK>` as the current device.

    Without it lmms-eval's evaluator builds its own `Accelerator()`, which on CPU is not distributed, and
    every rank fails in its gather (docs/multi-gpu.md). Returns whether it initialised the group, so the
    entry point that called it can destroy it at the end."""
    env = os.environ
    if int(env.get("WORLD_SIZE", 1)) <= 1 or not env.get("MASTER_ADDR"):
        return False
    import torch
    import torch.distributed as td

    if not td.is_available() or td.is_initialized():
        return False
    kw = {"timeout": timeout} if timeout is not None else {}
    if torch.cuda.is_available() and not str(device or "").startswith("cpu"):
        torch.cuda.set_device(int(env.get("LOCAL_RANK", 0)))
        td.init_process_group("cpu:gloo,cuda:nccl", **kw)
    else:
        td.init_process_group("gloo", **kw)
    return True


def destroy_process_group() -> None:
    import torch.distributed as td

    if td.is_initialized():
        td.destroy_process_group()
