"""The one seed rule of seeded sampling (a module of its own: the engines and the CSR search import it)."""
from __future__ import annotations


def stable_seed(seed: int, key: str) -> int:
    """A per-request seed independent of batch composition (batched == one-at-a-time draws): the one seed
    rule of seeded sampling, HF's CSR rows (training/csr/search.py) and vLLM requests alike."""
    import zlib

    return zlib.crc32(f"{seed}:{key}".encode()) & 0x7FFFFFFF
