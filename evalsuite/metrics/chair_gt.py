"""CHAIR ground truth: which COCO categories each image holds.

GT(image) = {category of every instance annotation, crowd regions included}
          ∪ {categories CHAIR finds in each of the image's reference captions}
exactly as the reference scripts build it, with either normaliser ("pattern" or "nltk_lemma").

Caches are JSON (optionally gzipped): `{"schema": 1, "normalizer": ..., "source": ..., "objects":
{"<image_id>": [sorted categories]}}`; a bare `{"<image_id>": [...]}` mapping (the golden caches'
format) loads too. The `chair.pkl` caches that circulate in hallucination repos are imported through
a restricted unpickler that only admits what such a cache holds.
"""
from __future__ import annotations

import gzip
import io
import json
import logging
import pickle
from pathlib import Path
from typing import Iterable

from evalsuite.errors import UserError

log = logging.getLogger(__name__)
SCHEMA = 1


def _normalizer_scorer(normalizer: str, tokenizer: str | None = None):
    from evalsuite.metrics.chair import ChairScorer

    return ChairScorer("original" if normalizer == "pattern" else "opera", tokenizer=tokenizer)


def build_gt(instances_files: Iterable[str | Path], captions_files: Iterable[str | Path],
             normalizer: str = "pattern", progress: bool = False, tokenizer: str | None = None) -> dict[int, list[str]]:
    """GT objects per image from COCO instances + captions files (loaded with pycocotools); reference
    captions tokenized with `tokenizer`'s rules (default nltk38, as the reference caches were built)."""
    from pycocotools.coco import COCO

    from evalsuite.progress import progress_bar

    if normalizer not in ("pattern", "nltk_lemma"):
        raise UserError(f"normalizer: unknown {normalizer!r} (pattern or nltk_lemma)")
    objects: dict[int, set[str]] = {}
    for path in instances_files:
        coco = _load_coco(COCO, path)
        for img_id in coco.getImgIds():
            objects.setdefault(int(img_id), set())
        for ann in coco.dataset.get("annotations", []):
            objects.setdefault(int(ann["image_id"]), set()).add(coco.cats[ann["category_id"]]["name"])
    scorer = _normalizer_scorer(normalizer, tokenizer)
    for path in captions_files:
        coco = _load_coco(COCO, path)
        for img_id in coco.getImgIds():
            objects.setdefault(int(img_id), set())
        anns = coco.dataset.get("annotations", [])
        for ann in progress_bar(anns, desc=f"GT captions ({normalizer})", disable=not progress):
            mentions, _ = scorer.mentions(ann["caption"])
            objects.setdefault(int(ann["image_id"]), set()).update(c for _, c, _ in mentions)
    return {k: sorted(v) for k, v in sorted(objects.items())}


def _load_coco(coco_cls, path):
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: COCO annotation file not found")
    import contextlib

    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress to stdout
        try:
            return coco_cls(str(path))
        except (ValueError, KeyError, TypeError) as exc:
            raise UserError(f"{path}: not a COCO annotation file ({exc})") from None


def save_gt(path: str | Path, objects: dict[int, list[str]], normalizer: str, source: str = "") -> Path:
    from evalsuite.files import write_bytes_atomic

    doc = {"schema": SCHEMA, "normalizer": normalizer, "source": source,
           "objects": {str(k): sorted(v) for k, v in objects.items()}}
    data = json.dumps(doc, separators=(",", ":")).encode()
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    return write_bytes_atomic(path, data)


def load_gt(path: str | Path) -> tuple[dict[int, frozenset[str]], dict]:
    """(image_id -> GT categories, metadata) from a JSON cache (gzipped when it ends in .gz)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: GT cache not found")
    raw = path.read_bytes()
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a JSON GT cache ({exc})") from None
    meta: dict = {}
    if isinstance(doc, dict) and "objects" in doc and "schema" in doc:
        meta = {k: v for k, v in doc.items() if k != "objects"}
        doc = doc["objects"]
    if not isinstance(doc, dict):
        raise UserError(f"{path}: expected a JSON object of image id -> category list")
    try:
        objects = {int(k): frozenset(v) for k, v in doc.items()}
    except (TypeError, ValueError) as exc:
        raise UserError(f"{path}: bad GT entry ({exc})") from None
    return objects, meta


class _PickledChairCache:
    """Inert stand-in for the pickled `CHAIR` evaluator object: it only receives attributes."""


class _RestrictedUnpickler(pickle.Unpickler):
    """Admits only containers and the CHAIR evaluator class (as an inert stand-in); refuses the rest."""

    _BUILTINS = {"set", "frozenset", "dict", "list", "tuple", "object", "str", "int"}
    _STANDINS = {("chair", "CHAIR"), ("__main__", "CHAIR"), ("utils.chair", "CHAIR"),
                 ("eval.chair", "CHAIR")}

    def find_class(self, module: str, name: str):
        import builtins
        import collections
        import copyreg

        if module in ("builtins", "__builtin__") and name in self._BUILTINS:
            return getattr(builtins, name)
        if module in ("copy_reg", "copyreg") and name == "_reconstructor":
            return copyreg._reconstructor
        if module == "collections" and name in ("defaultdict", "OrderedDict"):
            return getattr(collections, name)
        if (module, name) in self._STANDINS or name == "CHAIR":
            return _PickledChairCache
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


# A COCO chair.pkl (80 categories x ~120k images plus the evaluator's word lists) is a few MB.
MAX_PKL_BYTES = 256 << 20
_MEMO_PUTS = {"PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"}
_MEMO_INDEXED = {"PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET"}


def _check_opcodes(data: bytes) -> None:
    """Walk the opcode stream before unpickling and refuse what a valid pickle never holds but a crafted
    one uses to exhaust memory: a memo index beyond the memo entries written so far (picklers number
    them 0, 1, 2, ...; the C unpickler sizes its memo table to the index, so one 98-byte file could ask
    for gigabytes) or a frame longer than the file. `pickletools.genops` itself checks every declared
    string/bytes length against the bytes present."""
    import pickletools

    puts = 0
    for op, arg, pos in pickletools.genops(data):
        if op.name in _MEMO_INDEXED:
            limit = puts + 1 if op.name in _MEMO_PUTS else puts
            if not (isinstance(arg, int) and 0 <= arg < limit):
                raise pickle.UnpicklingError(f"{op.name} memo index {arg} at byte {pos} is out of range "
                                             f"({puts} memo entries so far)")
        if op.name in _MEMO_PUTS:
            puts += 1
        if op.name == "FRAME" and arg > len(data):
            raise pickle.UnpicklingError(f"FRAME of {arg} bytes at byte {pos} is longer than the file")


def import_chair_pkl(path: str | Path) -> dict[int, list[str]]:
    """GT objects (`imid_to_objects`) from a `chair.pkl` cache, without executing pickled code.

    The file is untrusted input: every failure while parsing it (whatever exception the unpickler or
    the checks raise on malformed bytes) is a UserError naming the file, never a traceback."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: chair.pkl not found")
    size = path.stat().st_size
    if size > MAX_PKL_BYTES:
        raise UserError(f"{path}: {size} bytes is larger than any chair.pkl ({MAX_PKL_BYTES} bytes at most)")
    data = path.read_bytes()
    try:
        _check_opcodes(data)
        obj = _RestrictedUnpickler(io.BytesIO(data), encoding="latin1").load()
        table = getattr(obj, "imid_to_objects", None) if not isinstance(obj, dict) else obj.get("imid_to_objects", obj)
        if not isinstance(table, dict):
            raise UserError(f"{path}: no imid_to_objects mapping in this pickle")
        return {int(k): sorted(str(c) for c in v) for k, v in table.items()}
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - malformed untrusted bytes can raise nearly any type
        reason = str(exc).splitlines()[0][:200] if str(exc) else ""
        raise UserError(f"{path}: cannot import this chair.pkl ({type(exc).__name__}: {reason})") from None
