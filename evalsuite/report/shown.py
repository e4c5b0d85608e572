"""Which checkpoints the report's per-image and per-question browsers show: a reader compares a few answers
side by side, not hundreds, and the page stays small whatever the store holds.

With more than `max_ckpts` checkpoints, the browsers show the ones the user names (`--ckpt`, repeatable),
then each lineage's base and its latest checkpoint (lineages in table order) while there is room; the page
names the others, and every checkpoint's numbers stay in the summary, `evalsuite table` and the store.
"""
from __future__ import annotations

from evalsuite.errors import UserError


def pick(ckpts: list[dict], base_of: dict, named: list = (), max_ckpts: int = 6) -> tuple[list[dict], list[dict]]:
    """(shown, left out) of `ckpts` (dicts with ckpt_id, name, lineage; in table order). `base_of` maps a
    ckpt_id to its base's; `named` are ckpt_ids the user asked for (those not among `ckpts` are ignored)."""
    ids = [c["ckpt_id"] for c in ckpts]
    wanted = [cid for cid in dict.fromkeys(named) if cid in ids]
    if len(ckpts) <= max_ckpts:
        return list(ckpts), []
    lineages: dict = {}
    for c in ckpts:
        lineages.setdefault(c.get("lineage"), []).append(c["ckpt_id"])
    for members in lineages.values():
        base = base_of.get(members[-1])
        for cid in (base if base in members else members[0], members[-1]):
            if len(wanted) < max_ckpts and cid not in wanted:
                wanted.append(cid)
    keep = set(wanted)
    return [c for c in ckpts if c["ckpt_id"] in keep], [c for c in ckpts if c["ckpt_id"] not in keep]


def resolve(ckpts, refs: list[str], max_ckpts: int) -> list:
    """The ckpt_ids `--ckpt` names (a checkpoint's name, path or hash prefix); one line when one is unknown."""
    from evalsuite.store.table import find_checkpoint

    out = []
    for ref in refs:
        try:
            out.append(find_checkpoint(ckpts, ref))
        except UserError as e:
            raise UserError(f"--ckpt {ref!r}: {str(e).split(': ', 1)[-1]}") from None
    out = list(dict.fromkeys(out))
    if len(out) > max_ckpts:
        raise UserError(f"--ckpt: {len(out)} checkpoints named, more than --max-ckpts {max_ckpts}")
    return out


def left_out_text(left: list[dict], limit: int = 12) -> str:
    """"a, b, c and 12 more" (the first `limit` names)."""
    names = [c["name"] for c in left]
    more = len(names) - limit
    return ", ".join(names[:limit]) + (f" and {more} more" if more > 0 else "")
