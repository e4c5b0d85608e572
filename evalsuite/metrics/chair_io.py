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


# A caption longer than this is refused, naming its line: CHAIR captions are a few KB (512 new tokens
# are ~3 KB), and the tokenizer's memory and time grow with one caption's length (a 50 MB caption took
# 6 GB), so one record must never decide how much memory a run needs.
MAX_RECORD_BYTES = 1 << 20


def iter_caption_lines(path: str | os.PathLike, max_bytes: int = MAX_RECORD_BYTES):
    """(where, image_id, caption) per non-blank line of a jsonl file (`caption` or LLaVA's `text` field),
    read one line at a time: memory does not grow with the number of lines, and a line longer than
    `max_bytes` is an error naming it before it is read whole."""
    import json

    path = Path(path)
    try:
        fh = open(path, "rb")  # noqa: SIM115 (closed by the `with` below; opening errors are the user's)
    except FileNotFoundError:
        raise UserError(f"{path}: captions file not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: captions file not found (a directory)") from None
    except OSError as e:
        raise UserError(f"{path}: captions file unreadable ({e.strerror or e})") from None
    with fh:
        number, offset = 0, 0
        while line := fh.readline(max_bytes + 2):
            number += 1
            where = f"{path}:{number}"
            body = line[:-1] if line.endswith(b"\n") else line
            if len(body) > max_bytes:
                raise UserError(f"{where}: record longer than {max_bytes:,} bytes, the limit per caption line "
                                "(drop or shorten that record)")
            try:
                text = body.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise UserError(f"{where}: not UTF-8 text (byte 0x{body[e.start]:02x} at offset "
                                f"{offset + e.start}); save the file as UTF-8") from None
            offset += len(line)
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as e:
                raise UserError(f"{where}: not valid JSON ({e.msg}, column {e.colno})") from None
            except RecursionError:
                raise UserError(f"{where}: not valid JSON (nested too deeply)") from None
            yield where, *_caption_fields(row, where)


def _caption_fields(row, where: str) -> tuple[int, str]:
    if not isinstance(row, dict):
        raise UserError(f"{where}: expected a JSON object")
    if "image_id" not in row:
        raise UserError(f"{where}: missing field 'image_id'")
    text = row.get("caption", row.get("text"))
    if text is None:
        raise UserError(f"{where}: missing field 'caption' (or 'text')")
    if not isinstance(text, str):
        raise UserError(f"{where}: field 'caption' must be a string")
    return parse_image_id(row["image_id"], where), text


def caption_image_ids(path: str | os.PathLike, max_bytes: int = MAX_RECORD_BYTES):
    """Every line checked (`iter_caption_lines`) and the image ids as one int64 array, 8 bytes a caption:
    a bad record is reported before anything expensive loads."""
    from array import array

    ids = array("q")
    for _, image_id, _ in iter_caption_lines(path, max_bytes):
        ids.append(image_id)
    if not ids:
        raise UserError(f"{path}: no captions")
    return ids


def read_captions(path: str | os.PathLike) -> list[tuple[int, str]]:
    """(image_id, caption) per line of a jsonl file; `caption` or LLaVA's `text` field."""
    items = [(image_id, text) for _, image_id, text in iter_caption_lines(path)]
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
                 cache_dir: Path | None = None, tokenizer: str | None = None) -> tuple[dict[int, frozenset[str]], dict]:
    """Build GT from COCO files once (reference captions tokenized with `tokenizer`'s rules, default
    nltk38); later calls load the JSON cache keyed by the files' content and the tokenizer."""
    from evalsuite.files import sha256_file
    from evalsuite.metrics import chair_gt
    from evalsuite.metrics.chair_tokenize import DEFAULT_TOKENIZER

    tokenizer = tokenizer or DEFAULT_TOKENIZER
    # caches built before the tokenizer was a setting (NLTK 3.10's rules) are not nltk38's: other key
    key = f"chair-gt-v{chair_gt.SCHEMA}:{normalizer}" + ("" if tokenizer == "nltk310" else f":{tokenizer}")
    h = hashlib.sha256(key.encode())
    for f in [*instances, *captions]:
        h.update(sha256_file(f).encode())
    cache = Path(cache_dir or default_cache_dir()) / f"chair_gt_{normalizer}_{h.hexdigest()[:16]}.json.gz"
    if cache.is_file():
        log.info("CHAIR GT: cached %s", cache)
        return chair_gt.load_gt(cache)
    log.info("CHAIR GT: building from %d instances + %d captions files (%s)", len(instances), len(captions),
             normalizer)
    objects = chair_gt.build_gt(instances, captions, normalizer, progress=True, tokenizer=tokenizer)
    source = ", ".join(str(p) for p in [*instances, *captions])
    chair_gt.save_gt(cache, objects, normalizer, source=source)
    return chair_gt.load_gt(cache)


def resolve_gt(spec: str | os.PathLike, normalizer: str, cache_dir: Path | None = None,
               tokenizer: str | None = None):
    """GT from a cache file (.json/.json.gz) or a COCO annotations folder; returns (objects, meta)."""
    from evalsuite.metrics import chair_gt

    path = Path(spec)
    if path.is_dir():
        inst, caps = coco_annotation_files(path)
        objects, meta = gt_from_coco(inst, caps, normalizer, cache_dir, tokenizer)
    else:
        objects, meta = chair_gt.load_gt(path)
        built = meta.get("normalizer")
        if built and built != normalizer:
            log.warning("%s was built with the %s normaliser; this variant expects %s GT", path, built,
                        normalizer)
    return objects, {**meta, "gt": str(path)}


class JsonlSink:
    """Rows written to a temp file beside `path` as they come, moved into place whole on a clean exit
    (removed on an error): per-caption output never waits in memory, and a reader never sees half a file."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._fh = None
        self._tmp = None

    def __enter__(self):
        import tempfile

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, self._tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        self._fh = os.fdopen(fd, "w", encoding="utf-8", buffering=1 << 20)
        return self

    def write(self, row: dict) -> None:
        import json

        self._fh.write(json.dumps(row, default=str) + "\n")

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self._fh.flush()
                os.fsync(self._fh.fileno())
            self._fh.close()
            if exc_type is None:
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(self._tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
                os.replace(self._tmp, self.path)
        finally:
            if os.path.exists(self._tmp):
                os.unlink(self._tmp)


def check_output_dir(out: Path, flag: str = "--output") -> None:
    """`out` may be new, empty, or an earlier `evalsuite chair` output (replaced); a summary.json or
    per_caption.jsonl that this command did not write is never overwritten."""
    import json

    from evalsuite.files import ensure_writable_dir

    ensure_writable_dir(out, flag, create=False)
    names = [n for n in ("summary.json", "per_caption.jsonl") if (out / n).exists()]
    if not names:
        return
    try:
        doc = json.loads((out / "summary.json").read_text(encoding="utf-8"))
        ours = isinstance(doc, dict) and {"variant", "num_caps", "captions_sha256", "ci"} <= set(doc)
    except (OSError, ValueError):
        ours = False
    if not ours:
        raise UserError(f"{flag} {out}: holds {' and '.join(names)} that `evalsuite chair` did not write; "
                        "pass a new or empty directory")
