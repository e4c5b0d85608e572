"""Parsers for files a user (or a downloaded checkpoint) hands us, each bounded in time, memory and depth.

Every reader of a user-facing structured file goes through here, so the limits are set once:

- `load_yaml(text, loader, where)`: a YAML document with at most `YAML_MAX_DEPTH` levels of nesting,
  at most `YAML_MAX_NODES` values and `YAML_MAX_ALIASED` alias copies once aliases are expanded (a
  "billion laughs" bomb is refused while it is still a small graph, before anything walks or prints the
  expanded value, so an error message built from any accepted value stays small).
- `loads_json(data, where)`: JSON (bytes or text) with a nesting limit, checked before the recursive
  decoder runs; the errors subclass ValueError so existing `except ValueError` handlers keep working.
- `check_safetensors(path)`: the whole safetensors header validated (object shape, dtypes, shapes,
  offsets in bounds, non-overlapping, covering the data exactly) before any library opens the file.
- `read_jsonl_records(path)`: cache lines as dicts, skipping non-UTF-8, torn or non-object lines.
- `short(value)`: a repr bounded in length, for error messages.
"""
from __future__ import annotations

import json
import logging
import math
import re
import struct
from pathlib import Path
from typing import Any, Iterator

from evalsuite.errors import UserError

log = logging.getLogger(__name__)

YAML_MAX_BYTES = 256 * 1024   # a preset is a few KB; PyYAML (pure Python) reads ~100 KB/s on a busy core
YAML_MAX_DEPTH = 64
YAML_MAX_NODES = 200_000      # values in the whole document, aliases expanded
YAML_MAX_ALIASED = 5_000      # values that exist only as alias copies: presets share a few small sections
JSON_MAX_DEPTH = 100
SAFETENSORS_MAX_HEADER = 100 * 1024 * 1024   # the limit the safetensors format itself sets


class JSONLimitError(ValueError):
    """JSON nested deeper than allowed (a ValueError, so `except ValueError` readers catch it)."""


def short(value: Any, limit: int = 80) -> str:
    """repr(value) cut to about `limit` characters, without ever building the whole repr of a big value."""
    if isinstance(value, (list, tuple, set, dict)):
        n = len(value)
        head = list(value.items())[:3] if isinstance(value, dict) else list(value)[:3]
        inner = ", ".join(short(x, limit // 3) for x in head)
        text = f"{type(value).__name__}[{n}]({inner}{', ...' if n > 3 else ''})"
    elif isinstance(value, str) and len(value) > limit:
        text = repr(value[:limit]) + f"...({len(value)} chars)"
    else:
        text = repr(value)
    return text if len(text) <= limit * 2 else text[:limit * 2] + "..."


# ------------------------------------------------------------------------------------------ YAML
def load_yaml(text: str, loader: Any, where: str) -> Any:
    """`text` parsed with the PyYAML `loader` class under depth and alias-expansion budgets.

    Raises yaml.YAMLError for ordinary syntax errors (the callers already turn those into one line)
    and UserError naming `where` for a document over a budget."""
    import yaml

    if len(text) > YAML_MAX_BYTES:
        raise UserError(f"{where}: {len(text)} characters of YAML, more than a preset needs "
                        f"({YAML_MAX_BYTES} at most); refusing to read it")
    depth = 0
    for event in yaml.parse(text, Loader=loader):   # PyYAML's event parser keeps an explicit stack, no recursion
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > YAML_MAX_DEPTH:
                raise UserError(f"{where}: YAML nested deeper than {YAML_MAX_DEPTH} levels (line "
                                f"{event.start_mark.line + 1}); refusing to read it")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
    ld = loader(text)
    try:
        node = ld.get_single_node()
        if node is None:
            return None
        memo: dict[int, int] = {}
        n = _expanded_size(node, memo)
        if n > YAML_MAX_NODES or n - len(memo) > YAML_MAX_ALIASED:
            raise UserError(f"{where}: YAML expands to {n if n < 10**12 else 'over 10^12'} values through its "
                            f"aliases (&anchor/*alias), more than the {YAML_MAX_ALIASED} alias copies allowed; refusing to read it")
        try:
            return ld.construct_document(node)
        except ValueError as e:   # e.g. an int of more than 4300 digits (Python's own limit)
            if isinstance(e, yaml.YAMLError):
                raise
            raise UserError(f"{where}: a value YAML cannot convert ({str(e)[:120]})") from None
    finally:
        ld.dispose()


def _expanded_size(node: Any, memo: dict[int, int]) -> int:
    """Number of nodes `node` stands for once every alias is copied out (aliases share node objects,
    so the memo keeps this linear in the file size; depth is bounded by the event pass)."""
    import yaml

    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = 1   # a recursive alias (a node containing itself) counts once here
    total = 1
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            total += _expanded_size(child, memo)
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            total += _expanded_size(k, memo) + _expanded_size(v, memo)
    total = min(total, 10**13)
    memo[key] = total
    return total


# ------------------------------------------------------------------------------------------ JSON
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")


def json_depth(data: bytes, limit: int) -> int:
    """Maximum bracket nesting of JSON `data` (strings skipped); stops counting once past `limit`."""
    brackets = _NOT_BRACKET.sub(b"", _JSON_STRING.sub(b"", data))
    depth = deepest = 0
    for c in brackets:
        if c in (0x5B, 0x7B):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        else:
            depth -= 1
    return deepest


def loads_json(data: bytes | str, where: str = "JSON", max_depth: int = JSON_MAX_DEPTH) -> Any:
    """json.loads with a nesting limit. Non-UTF-8 bytes raise UnicodeDecodeError, bad JSON
    json.JSONDecodeError, too deep JSONLimitError: all ValueErrors."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    text = raw.decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
    if raw.count(b"[") + raw.count(b"{") > max_depth and json_depth(raw, max_depth) > max_depth:
        raise JSONLimitError(f"{where}: JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(text)
    except RecursionError:   # belt and braces: the limit above should make this unreachable
        raise JSONLimitError(f"{where}: JSON nested too deeply") from None


def read_json_file(path: str | Path, what: str | None = None, max_depth: int = JSON_MAX_DEPTH) -> Any:
    """A JSON file's value; unreadable, non-UTF-8, invalid or too deep is one UserError naming the file."""
    p = Path(path)
    name = what or str(p)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise UserError(f"{name}: cannot read ({e.strerror or e})") from None
    try:
        return loads_json(raw, name, max_depth)
    except UnicodeDecodeError as e:
        raise UserError(f"{name}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except JSONLimitError as e:
        raise UserError(str(e)) from None
    except json.JSONDecodeError as e:
        raise UserError(f"{name}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except ValueError as e:   # e.g. an int of more than 4300 digits
        raise UserError(f"{name}: not valid JSON ({str(e)[:120]})") from None


def read_json_object(path: str | Path, what: str | None = None) -> dict:
    """read_json_file that must be a JSON object (config.json, tokenizer_config.json, ...)."""
    value = read_json_file(path, what)
    if not isinstance(value, dict):
        raise UserError(f"{what or path}: expected a JSON object, got a JSON {type(value).__name__}")
    return value


# ----------------------------------------------------------------------------------- safetensors
# bits per element of every dtype the safetensors format defines
_DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
               "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64,
               "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}


def check_safetensors(path: str | Path) -> dict:
    """Validate a safetensors file's header against the file; its {name: entry} header, or one UserError.

    Checked: an 8-byte length within the file and the format's 100 MB limit, a UTF-8 JSON object at most
    JSON_MAX_DEPTH deep, `__metadata__` a string map, every other entry an object with a known `dtype`,
    a `shape` of non-negative ints and `data_offsets` [begin, end] of ints with end - begin equal to the
    shape's byte size; the ranges must not overlap and must cover the data section exactly (header +
    data = file size)."""
    p = Path(path)
    try:
        size = p.stat().st_size
        with open(p, "rb") as fh:
            raw = fh.read(8)
            if len(raw) < 8:
                raise UserError(f"{p}: truncated safetensors file (no header)")
            (n,) = struct.unpack("<Q", raw)
            if n > size - 8:
                raise UserError(f"{p}: truncated or corrupt safetensors file (header length {n} > file size)")
            if n > SAFETENSORS_MAX_HEADER:
                raise UserError(f"{p}: corrupt safetensors file (header of {n} bytes, the format allows 100 MB)")
            blob = fh.read(n)
    except OSError as e:
        raise UserError(f"{p}: cannot read ({e.strerror or e})") from None
    try:
        header = loads_json(blob, str(p))
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"{p}: corrupt safetensors header (not a UTF-8 JSON object of bounded depth)") from None
    if not isinstance(header, dict):
        raise UserError(f"{p}: corrupt safetensors header (a JSON {type(header).__name__}, not an object)")
    data_len = size - 8 - n
    ranges = []
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise UserError(f"{p}: corrupt safetensors header (__metadata__ is not a map of strings)")
            continue
        ranges.append(_tensor_range(p, name, entry, data_len))
    ranges.sort()
    pos = 0
    for begin, end, name in ranges:
        if begin != pos:
            what = "overlaps the previous tensor" if begin < pos else f"leaves a gap at byte {pos}"
            raise UserError(f"{p}: corrupt safetensors header (tensor {short(name)} {what})")
        pos = end
    if pos != data_len:
        raise UserError(f"{p}: truncated or corrupt safetensors file ({size} bytes; the header describes "
                        f"{8 + n + pos})")
    return header


def _tensor_range(p: Path, name: str, entry: Any, data_len: int) -> tuple[int, int, str]:
    def bad(why: str) -> UserError:
        return UserError(f"{p}: corrupt safetensors header (tensor {short(name)}: {why})")

    if not isinstance(entry, dict):
        raise bad(f"entry is a JSON {type(entry).__name__}, not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in _DTYPE_BITS:
        raise bad(f"unknown dtype {short(dtype)}")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise bad(f"shape {short(shape)} is not a list of non-negative ints")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]):
        raise bad(f"data_offsets {short(offsets)} is not [begin, end] with 0 <= begin <= end")
    if offsets[1] > data_len:
        raise bad(f"data_offsets end {offsets[1]} is past the data ({data_len} bytes): the file is truncated")
    nbits = math.prod(shape) * _DTYPE_BITS[dtype]
    if nbits != (offsets[1] - offsets[0]) * 8:
        raise bad(f"shape {short(shape)} of {dtype} needs {nbits / 8:g} bytes, data_offsets give "
                  f"{offsets[1] - offsets[0]}")
    return offsets[0], offsets[1], name


# ----------------------------------------------------------------------------------- JSONL caches
def read_jsonl_records(path: str | Path, what: str = "cache") -> Iterator[dict]:
    """The JSON-object lines of a cache file; a line that is not UTF-8, not JSON (a torn write), too
    deep or not an object is skipped, and the count is logged once as a warning naming the file."""
    skipped = 0
    p = Path(path)
    with open(p, "rb") as fh:
        for raw in fh:
            if not raw.strip():
                continue
            try:
                rec = loads_json(raw, str(p))
            except ValueError:   # UnicodeDecodeError, JSONDecodeError and JSONLimitError
                skipped += 1
                continue
            if isinstance(rec, dict):
                yield rec
            else:
                skipped += 1
    if skipped:
        log.warning("%s: skipped %d unreadable %s line(s) (an interrupted write or a damaged file)",
                    p, skipped, what)
