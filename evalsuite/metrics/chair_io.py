"""CHAIR inputs: caption files, and GT from a cache file or a COCO annotations folder (cached by content)."""
from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path

from evalsuite.errors import UserError

log = logging.getLogger(__name__)
_ID_IN_NAME = re.compile(r"(\d+)(?:\.[A-Za-z]+)?$")


def parse_image_id(value, where: str) -> int:
    """An int, a numeric string, or a COCO file name such as "COCO_val2014_000000002239.jpg"."""
    if isinstance(value, bool):
        raise UserError(f"{where}: image_id must be an int or a COCO file name, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        m = _ID_IN_NAME.search(value.strip())
        if m:
            return int(m.group(1))
    raise UserError(f"{where}: image_id must be an int or a COCO file name, got {value!r}")


def read_captions(path: str | os.PathLike) -> list[tuple[int, str]]:
    """(image_id, caption) per line of a jsonl file; `caption` or LLaVA's `text` field."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: captions file not found")
    from evalsuite.files import read_json_records

    items = []
    for where, row in read_json_records(path, "captions", jsonl=True):
        if not isinstance(row, dict):
            raise UserError(f"{where}: expected a JSON object")
        if "image_id" not in row:
            raise UserError(f"{where}: missing field 'image_id'")
        text = row.get("caption", row.get("text"))
        if text is None:
            raise UserError(f"{where}: missing field 'caption' (or 'text')")
        if not isinstance(text, str):
            raise UserError(f"{where}: field 'caption' must be a string")
        items.append((parse_image_id(row["image_id"], where), text))
    if not items:
        raise UserError(f"{path}: no captions")
    return items


def coco_annotation_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """instances/captions json files of a COCO folder: FOLDER/annotations/{instances,captions}_*.json
    (every split, as the reference unions train and val), or FOLDER/{instances,captions}*.json."""
    for base in (folder / "annotations", folder):
        inst = sorted(base.glob("instances*.json"))
        caps = sorted(base.glob("captions*.json"))
        if inst and caps:
            return inst, caps
    raise UserError(f"{folder}: no instances*.json + captions*.json (directly or under annotations/)")


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "evalsuite" / "chair_gt"


def gt_from_coco(instances: list[Path], captions: list[Path], normalizer: str,
                 cache_dir: Path | None = None) -> tuple[dict[int, frozenset[str]], dict]:
    """Build GT from COCO files once; later calls load the JSON cache keyed by the files' content."""
    from evalsuite.files import sha256_file
    from evalsuite.metrics import chair_gt

    h = hashlib.sha256(f"chair-gt-v{chair_gt.SCHEMA}:{normalizer}".encode())
    for f in [*instances, *captions]:
        h.update(sha256_file(f).encode())
    cache = Path(cache_dir or default_cache_dir()) / f"chair_gt_{normalizer}_{h.hexdigest()[:16]}.json.gz"
    if cache.is_file():
        log.info("CHAIR GT: cached %s", cache)
        return chair_gt.load_gt(cache)
    log.info("CHAIR GT: building from %d instances + %d captions files (%s)", len(instances), len(captions),
             normalizer)
    objects = chair_gt.build_gt(instances, captions, normalizer, progress=True)
    source = ", ".join(str(p) for p in [*instances, *captions])
    chair_gt.save_gt(cache, objects, normalizer, source=source)
    return chair_gt.load_gt(cache)


def resolve_gt(spec: str | os.PathLike, normalizer: str, cache_dir: Path | None = None):
    """GT from a cache file (.json/.json.gz) or a COCO annotations folder; returns (objects, meta)."""
    from evalsuite.metrics import chair_gt

    path = Path(spec)
    if path.is_dir():
        inst, caps = coco_annotation_files(path)
        objects, meta = gt_from_coco(inst, caps, normalizer, cache_dir)
    else:
        objects, meta = chair_gt.load_gt(path)
        built = meta.get("normalizer")
        if built and built != normalizer:
            log.warning("%s was built with the %s normaliser; this variant expects %s GT", path, built,
                        normalizer)
    return objects, {**meta, "gt": str(path)}
