"""One configuration mechanism for every workflow: typed dataclasses, YAML presets, overrides.

    cfg = load(CSRConfig, "configs/csr.yaml", ["iterations=1", "tree.max_depth=4", "--seed", "3"])

Sources, later wins: the dataclass defaults < the YAML preset < the overrides. An override is
`key=value`, `section.key=value`, `--key value`, `--key=value` or a bare `--flag` (= true, for a
true/false field only: any other field given bare is an error, not the string "true"); values are
read as YAML scalars (`1e-4` is a float here, unlike PyYAML's YAML 1.1 reading), except for a field
that takes a string: it gets the text exactly as typed (`--prompt 'A # b'`, `--save_strategy no`); the
word `null` unsets an optional one.

`build(cls, mapping)` checks every key against the dataclass fields (unknown keys are errors, with a
"did you mean"), every value against the field's annotation (`int`, `float`, `str`, `bool`,
`X | None`, `Literal[...]`, enums, `list[X]`, `dict[str, X]`, nested dataclasses), then constructs the
object and checks the ranges its fields declare (`opt(..., ge=1)`, `gt=0, le=1`: `check_fields`); a
`__post_init__` checks what spans fields. Every problem is one `UserError` line naming the source
(the YAML file or "command line") and the dotted key, raised before any model is loaded.

A field the resulting settings never read (a class lists them in `unread()`: `lora_r` under `use_lora:
false`, ...) is refused when set on the command line and warned about, in one line, when set by a preset
(`report_unread`), so no option is accepted and ignored.

Fields may carry `metadata={"help": ..., "path": "dir"|"file"|"any"}`; `missing_paths(cfg)` lists the
path fields that do not exist (`--dry-run` prints them as warnings: presets carry placeholders).
Only PyYAML is imported here, so entry points stay instant.
"""
from __future__ import annotations

import dataclasses
import difflib
import enum
import re
import types
import typing
from pathlib import Path
from typing import Any

from evalsuite.errors import UserError
from evalsuite.safeio import load_yaml

CLI = "command line"


class Text(str):
    """An override value as the user typed it: parsed as YAML, kept as text where a string fits better."""


class Bare(Text):
    """A `--flag` given without a value: true for a true/false field, an error for any other (a bare
    `--prompt` must not become the prompt 'true')."""

    def __new__(cls):
        return super().__new__(cls, "true")


BARE_ERROR = "needs a value (only a true/false option may be given without one)"


# --------------------------------------------------------------------------------------- YAML
def _loader():
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that reads `1e-4` and `5E3` as floats (YAML 1.2), as users mean them."""

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^(?:[-+]?(?:\d[\d_]*)?\.?\d*[eE][-+]?\d+|[-+]?\d[\d_]*\.\d*(?:[eE][-+]?\d+)?"
                   r"|\.\d+(?:[eE][-+]?\d+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
        list("-+0123456789."))
    return Loader


def parse_scalar(text: str) -> Any:
    """A command-line value as YAML reads it ("3" -> 3, "1e-4" -> 1e-4, "[a, b]" -> list, "null" -> None)."""
    import yaml

    try:
        return load_yaml(text, _loader(), CLI)  # SafeLoader subclass, depth/alias budgets (evalsuite/safeio.py)
    except yaml.YAMLError:
        return str(text)


def read_yaml(path: str | Path, what: str = "--config") -> dict[str, Any]:
    """A preset file as a mapping; a missing file, bad YAML or a non-mapping is one line naming it."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise UserError(f"{what}: no such file {str(p)!r}")
    try:
        text = p.read_text(encoding="utf-8")
        data = load_yaml(text, _loader(), str(p)) or {}  # SafeLoader subclass, depth/alias budgets
    except UnicodeDecodeError as e:
        raise UserError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except yaml.YAMLError as e:
        raise UserError(f"{p}: invalid YAML ({' '.join(str(e).split())})") from None
    if not isinstance(data, dict):
        raise UserError(f"{p}: expected a mapping of key: value, got {type(data).__name__}")
    return data


# ---------------------------------------------------------------------------------- overrides
def split_args(argv: list[str], flags: tuple[str, ...] = ()) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """argv -> ({flag: value} for the entry point's own `flags`, [(dotted key, Text value), ...]).

    `flags` are options the entry point handles itself (e.g. "config", "method"); "dry_run" style
    names take no value when listed with a trailing "!" ("dry_run!")."""
    own = {f.rstrip("!"): f.endswith("!") for f in flags}
    found: dict[str, Any] = {}
    items: list[tuple[str, Any]] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            key, eq, value = a[2:].partition("=")
            key = key.replace("-", "_")
            if not key:
                raise UserError(f"arguments: {a!r} is not an option")
            if own.get(key):            # a switch of the entry point: no value
                found[key] = True
                i += 1
                continue
            if not eq:
                nxt = argv[i + 1] if i + 1 < len(argv) else None
                if nxt is None or nxt.startswith("--"):
                    value = Bare()      # true for a bool field (HfArgumentParser's bool flags), else an error
                else:
                    value, i = nxt, i + 1
            i += 1
            if key in own:
                if isinstance(value, Bare):
                    raise UserError(f"--{key.replace('_', '-')}: {BARE_ERROR}")
                found[key] = value
            else:
                items.append((key, value if isinstance(value, Bare) else Text(value)))
            continue
        key, eq, value = a.partition("=")
        if not eq or not key or key.startswith("-"):
            raise UserError(f"arguments: {a!r} is neither --key value nor key=value")
        items.append((key.replace("-", "_") if "." not in key else key, Text(value)))
        i += 1
    return found, items


def apply_overrides(data: dict[str, Any], items: list[tuple[str, Any]], origins: dict[str, str]) -> dict[str, Any]:
    """Set each dotted key in `data` (sections created as needed); `origins[key]` records the source."""
    for key, value in items:
        node = data
        *parents, leaf = key.split(".")
        for depth, p in enumerate(parents):
            child = node.get(p)
            if child is None:
                child = node[p] = {}
            if not isinstance(child, dict):
                raise UserError(f"{CLI}: {'.'.join(parents[:depth + 1])} is not a section (in {key}=...)")
            node = child
        node[leaf] = value
        origins[key] = CLI
    return data


# ------------------------------------------------------------------------------------ typing
def _hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is type(None):
        return "null"
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        return "a list"
    if origin is dict or tp is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping (section)"
    return {int: "an int", float: "a number", str: "a string", bool: "true/false"}.get(tp, getattr(tp, "__name__", str(tp)))


class _Mismatch(Exception):
    pass


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return f"the string {str(value)!r}"
    return f"{type(value).__name__} {value!r}"


def coerce(value: Any, tp: Any, key: str) -> Any:
    """`value` checked (and for Text / nested sections, converted) against annotation `tp`."""
    if isinstance(value, Bare):  # true for a field that takes true/false (alone or among other types)
        if tp is bool or (typing.get_origin(tp) in (typing.Union, types.UnionType) and bool in typing.get_args(tp)):
            return True
        raise _Mismatch(BARE_ERROR)
    if isinstance(value, Text):
        if tp is str or _is_optional_str(tp):
            # a prompt, path or label is taken as typed: YAML would drop "# ..." as a comment, fold
            # lines, strip quotes and read "" or "~" as null. Only the word null unsets such a field.
            return None if str(value) == "null" and tp is not str else str(value)
        parsed = parse_scalar(value)
        try:
            return coerce(parsed, tp, key)
        except _Mismatch:
            # `--save_strategy no`: YAML reads "no" as false; a Literal/enum of words takes the text
            if parsed != str(value) and _accepts_str(tp):
                return coerce(str(value), tp, key)
            raise
    if tp is Any or tp is object:
        return _untyped(value)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = sorted((a for a in args if a is not type(None)), key=lambda a: a is str)
        for a in options:
            try:
                return coerce(value, a, key)
            except _Mismatch:
                if len(options) == 1 and typing.get_origin(a) is typing.Literal:
                    raise  # `Literal[...] | None`: name the choices ("'coco' is not one of ...")
                continue
        raise _Mismatch(f"expected {_describe(tp)}, got {_shown(value)}")
    if origin is typing.Literal:
        if value in args and not (isinstance(value, bool) and not any(isinstance(a, bool) for a in args)):
            return value
        raise _Mismatch(f"{value!r} is not one of {', '.join(repr(a) for a in args)}")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise _Mismatch(f"{value!r} is not one of {', '.join(repr(m.value) for m in tp)}") from None
    if dataclasses.is_dataclass(tp):
        if dataclasses.is_dataclass(value) and isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise _Mismatch(f"expected a mapping (section), got {_shown(value)}")
        return value  # built by build() with the right key prefix
    if origin in (list, tuple) or tp in (list, tuple):
        if isinstance(value, str) and args and args[0] is str:
            value = [v.strip() for v in value.split(",") if v.strip()]  # "chair,pope" on the command line
        if not isinstance(value, (list, tuple)):
            raise _Mismatch(f"expected a list, got {_shown(value)}")
        item = args[0] if args else Any
        return [coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise _Mismatch(f"expected a mapping, got {_shown(value)}")
        vt = args[1] if len(args) == 2 else Any
        return {str(k): coerce(v, vt, f"{key}.{k}") for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif isinstance(tp, type):
        if isinstance(value, tp):
            return value
    else:
        return value
    raise _Mismatch(f"expected {_describe(tp)}, got {_shown(value)}")


def _untyped(value: Any) -> Any:
    """Override text inside an untyped mapping (checked later by the section's own class) read as YAML."""
    if isinstance(value, Text):
        return parse_scalar(value)
    if isinstance(value, dict):
        return {k: _untyped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_untyped(v) for v in value]
    return value


def _is_optional_str(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and set(typing.get_args(tp)) == {str, type(None)}


def _accepts_str(tp: Any) -> bool:
    if tp is str or tp is Any:
        return True
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return True
    if typing.get_origin(tp) is typing.Literal:
        return any(isinstance(a, str) for a in typing.get_args(tp))
    return any(_accepts_str(a) for a in typing.get_args(tp)) if typing.get_origin(tp) in (typing.Union, types.UnionType) else False


# ------------------------------------------------------------------------------------- build
def _source(origins: dict[str, str], key: str, default: str) -> str:
    """Where `key` was set: itself, a parent section, or a child key given on the command line."""
    for k in (key, *(key.rsplit(".", n)[0] for n in range(1, key.count(".") + 1))):
        if k in origins:
            return origins[k]
    return next((src for k, src in origins.items() if k.startswith(key + ".")), default)


def _takes_mapping(tp: Any) -> bool:
    if tp is Any or tp is dict or typing.get_origin(tp) is dict or dataclasses.is_dataclass(tp):
        return True
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and any(_takes_mapping(a) for a in typing.get_args(tp))


def build(cls, data: dict[str, Any], where: str = "config", origins: dict[str, str] | None = None,
          prefix: str = "", moved_prefix: str | None = None, report: bool = True):
    """A `cls` instance from a mapping: unknown keys, wrong types and failed checks are one line each.
    moved_prefix: where this section's MOVED keys now live (None = inside it; a parent's MOVED_UP).
    report: check the fields that the resulting settings never read (`report_unread`); False for a
    section built inside another config's checks (that config reports them, knowing their origins)."""
    origins = origins or {}
    if not isinstance(data, dict):
        raise UserError(f"{where}: {prefix.rstrip('.') or 'config'}: expected a mapping, got {type(data).__name__}")
    flds = {f.name: f for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")}
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{prefix}{key}"
        src = _source(origins, full, where)
        if key not in flds:
            moved = getattr(cls, "MOVED", {}).get(key)  # a key a release ago, now another field's spelling
            if moved:
                to = prefix if moved_prefix is None else moved_prefix
                raise UserError(f"{src}: {full}: renamed {to}{moved} (YAML: {moved.split('.')[0]}: "
                                f"{{{moved.split('.', 1)[1]}: ...}}; command line: {to}{moved}=VALUE)")
            close = difflib.get_close_matches(str(key), list(flds), n=1)
            hint = f" (did you mean {prefix + close[0]!r}?)" if close else ""
            raise UserError(f"{src}: unknown key {full!r}{hint}")
        tp = hints[key]
        if isinstance(value, dict) and not _takes_mapping(tp):
            raise UserError(f"{src}: {full} is not a section (it takes {_describe(tp)})")
        try:
            value = coerce(value, tp, full)
        except _Mismatch as e:
            raise UserError(f"{src}: {full}: {e}") from None
        sub = _dataclass_in(tp)
        if sub is not None and isinstance(value, dict):
            value = build(sub, value, where, origins, prefix=f"{full}.",
                          moved_prefix=prefix if key in getattr(cls, "MOVED_UP", ()) else None)
        kwargs[key] = value
    try:
        obj = cls(**kwargs)
        check_fields(obj)   # declared choices and ranges (a class may check them itself, naming its section)
    except UserError as e:  # a __post_init__ check: "field: message"; name where that field was set
        head = str(e).split(":", 1)[0].strip()
        field_name = head.split(".")[-1]
        # a section's own check names its bare field ("data_root: ..."): name it as the user wrote it
        shown = f"{prefix}{e}" if prefix and head == field_name and field_name in flds else str(e)
        # a nested section naming itself ("judge.url: ..." inside a CSR preset's eval:): its full key
        if prefix and head != field_name and f"{prefix}{field_name}".endswith(f".{head}"):
            shown = f"{prefix}{field_name}{str(e)[len(head):]}"
        src = _source(origins, prefix + field_name, where)
        # a top-level check may name a key inside an untyped section ("train.image_aspect"): its own origin
        raise UserError(f"{_source(origins, head, src) if not prefix else src}: {shown}") from None
    except (ValueError, TypeError) as e:
        raise UserError(f"{where}: {prefix.rstrip('.') + ': ' if prefix else ''}{' '.join(str(e).split())}") from None
    if report and not prefix:
        report_unread(obj, data, where, origins)
    return obj


# ------------------------------------------------------------------------------- field checks
_BOUNDS = {"ge": (">=", lambda v, b: v >= b), "gt": (">", lambda v, b: v > b),
           "le": ("<=", lambda v, b: v <= b), "lt": ("<", lambda v, b: v < b)}


def bound_problem(f: dataclasses.Field, value: Any) -> str | None:
    """What is wrong with a number against its field's declared range (`opt(..., ge=1)`, `gt=0, le=1`),
    or None; None and non-numbers (a field's `auto`) are not numbers to check."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    bounds = [(k, f.metadata[k]) for k in _BOUNDS if f.metadata and k in f.metadata]
    if all(_BOUNDS[k][1](value, b) for k, b in bounds):
        return None
    low = next(((k, b) for k, b in bounds if k in ("ge", "gt")), None)
    high = next(((k, b) for k, b in bounds if k in ("le", "lt")), None)
    if low and high:
        return (f"must be in {'[' if low[0] == 'ge' else '('}{low[1]}, {high[1]}{']' if high[0] == 'le' else ')'}"
                f", got {value}")
    k, b = low or high
    return f"must be {_BOUNDS[k][0]} {b}, got {value}"


def check_fields(obj: Any, section: str = "") -> None:
    """Every field of `obj` against its declaration: a `Literal`'s choices, an `opt` range. `build` calls
    it on what it builds; a class constructed in code too calls it from its __post_init__.
    section: the dotted name errors carry ("tree" -> "tree.num_beams: must be >= 1, got 0")."""
    try:
        hints = _hints(type(obj))
    except (NameError, TypeError):   # a library's class whose annotations do not resolve: nothing declared here
        return
    for f in dataclasses.fields(obj):
        if f.name.startswith("_") or not f.init:
            continue
        value, name = getattr(obj, f.name), f"{section}.{f.name}" if section else f.name
        tp = hints.get(f.name)
        allowed = _literal_args(tp)
        if allowed and isinstance(value, str) and value not in allowed and str not in typing.get_args(tp):
            raise UserError(f"{name}: {value!r} is not one of {', '.join(repr(c) for c in allowed)}")
        problem = bound_problem(f, value)
        if problem:
            raise UserError(f"{name}: {problem}")


def _literal_args(tp: Any) -> tuple:
    """The choices of a `Literal[...]` annotation, also inside `X | None` / `int | Literal[...]`."""
    if typing.get_origin(tp) is typing.Literal:
        return typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return tuple(c for a in typing.get_args(tp) for c in _literal_args(a))
    return ()


# ------------------------------------------------------------------------------- unread fields
def _ours(cls) -> bool:
    """A class of this project (its typed sections), not a library's (TrainingArguments and the like)."""
    return cls.__module__.startswith(("evalsuite.", "training."))


def unread_fields(obj: Any, prefix: str = "") -> list[tuple[str, str, Any, Any]]:
    """(field, switch, the switch's value, the value that reads the field) for every field of `obj` and its
    typed sections that the current settings never read: each class lists its own in an `unread()` method
    (dotted names relative to it; a class with untyped sections, e.g. CSR's `train:`, lists theirs too).
    The value is None where the user cannot change the switch (the CSR loop sets train.method)."""
    out = [(prefix + f, prefix + s, now, need) for f, s, now, need in getattr(obj, "unread", list)()]
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name, None)
        if dataclasses.is_dataclass(value) and not isinstance(value, type) \
                and (_ours(type(value)) or f.metadata.get("section")):
            out += unread_fields(value, f"{prefix}{f.name}.")
    return out


def _word(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) or value is None else str(value)


def _given(data: Any, key: str) -> bool:
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


def report_unread(obj: Any, data: dict[str, Any], where: str, origins: dict[str, str] | None) -> None:
    """A field set explicitly that the resulting settings never read would be accepted and ignored. Set on
    the command line: one error naming the field and the switch. Set by a preset (or a mapping from code;
    a preset may serve both settings, e.g. configs/csr.yaml with train.use_lora=false): one warning line
    listing them. A field left at its default says nothing."""
    origins = origins or {}
    quiet: dict[str, list[str]] = {}  # "switch value" -> the fields it leaves unread
    seen: set[str] = set()  # a field with two reasons (eval.gen.temperature: no task reads gen, greedy) says the first
    for name, switch, now, need in unread_fields(obj):
        if not _given(data, name) or name in seen:
            continue
        seen.add(name)
        src = _source(origins, name, where)
        fix = "" if need is None else f"--{switch} {_word(need)} or " if "." not in switch else \
            f"{switch}={_word(need)} or "
        if src == CLI or src.startswith("--"):
            raise UserError(f"{src}: {name}: has no effect with {switch} {_word(now)}; "
                            f"{'pass ' + fix if fix else ''}drop {name}")
        quiet.setdefault(f"{switch} {_word(now)}", []).append(name)
    if quiet:
        import logging

        logging.getLogger(__name__).warning("%s: set but without effect: %s", where, "; ".join(
            f"{', '.join(names)} (under {why})" for why, names in quiet.items()))


def _dataclass_in(tp: Any):
    if dataclasses.is_dataclass(tp):
        return tp
    for a in typing.get_args(tp):
        if dataclasses.is_dataclass(a):
            return a
    return None


def load(cls, path: str | Path | None = None, overrides: list | None = None, base: dict | None = None):
    """`cls` from a YAML preset (optional), a base mapping (optional) and overrides: an argv-style list
    (see module doc) or (dotted key, value) pairs."""
    data = dict(base or {})
    where = "config"
    if path is not None:
        data.update(read_yaml(path))
        where = str(path)
    overrides = list(overrides or [])
    items = overrides if all(isinstance(o, tuple) for o in overrides) else split_args(overrides)[1]
    origins: dict[str, str] = {}
    apply_overrides(data, items, origins)
    return build(cls, data, where, origins)


# -------------------------------------------------------------------------------------- help
def opt(default: Any = dataclasses.MISSING, help: str = "", *, factory: Any = None, **metadata: Any) -> Any:
    """A dataclass field with its help text (every `--help` shows it) and other metadata: `path`,
    `identity` (False: not part of a result's identity, evalsuite/identity.py), `alias` (an eval task
    field's convenience flag, evalsuite/run_config.py), `section` (a typed section defined outside the
    project: an own task's Options)."""
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={"help": help, **metadata})
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


def config_fields(cls, prefix: str = ""):
    """(dotted key, field, section class or None) of every field of `cls`, sections followed by their fields."""
    for key, f, sub, _ in _typed_fields(cls, prefix):
        yield key, f, sub


def _typed_fields(cls, prefix: str = ""):
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if f.name.startswith("_") or not f.init:
            continue
        sub = _dataclass_in(hints[f.name])
        if sub is not None and not _ours(sub) and not f.metadata.get("section"):
            sub = None  # a library's own settings object (TrainingArguments.parallelism_config): one field
        yield f"{prefix}{f.name}", f, sub, hints[f.name]
        if sub is not None:
            yield from _typed_fields(sub, f"{prefix}{f.name}.")


def _choices(tp: Any) -> str:
    """' (one of: a | b)' for a Literal field (optional or not), else ''."""
    args = [a for a in typing.get_args(tp) if a is not type(None)] if typing.get_origin(tp) in (
        typing.Union, types.UnionType) else [tp]
    lits = [a for a in args if typing.get_origin(a) is typing.Literal]
    return f" (one of: {_describe(lits[0])})" if len(lits) == 1 and len(typing.get_args(lits[0])) > 1 else ""


def _range(f) -> str:
    """' (>= 1)' / ' (in (0, 1])' for a field with a declared range, else ''."""
    bounds = [(k, f.metadata[k]) for k in _BOUNDS if f.metadata and k in f.metadata]
    if len(bounds) == 2:
        (lk, lo), (hk, hi) = bounds
        return f" (in {'[' if lk == 'ge' else '('}{lo}, {hi}{']' if hk == 'le' else ')'})"
    return f" ({_BOUNDS[bounds[0][0]][0]} {bounds[0][1]})" if bounds else ""


def _default_shown(f) -> str:
    if f.default is not dataclasses.MISSING:
        return repr(f.default) if isinstance(f.default, str) else str(f.default)
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
        return "" if dataclasses.is_dataclass(value) else str(value)
    return "required"


def help_lines(cls, skip: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """One line per field of `cls` (sections recursed as `section.key`): name, type, help, default."""
    lines = []
    for key, f, sub, tp in _typed_fields(cls):
        if key in skip:
            continue
        text = " ".join(str(f.metadata.get("help", "") if f.metadata else "").split())
        if len(text) > 160:  # a library's paragraph (TrainingArguments): its first sentence
            text = text.split(". ")[0].rstrip(".") + " ..."
        text += _choices(tp) + _range(f)
        if sub is not None:
            lines.append(f"  {key + ':':30s} (section) {text}")
            continue
        default = _default_shown(f)
        lines.append(f"  {key:30s} {text} [default: {default}]" if default else f"  {key:30s} {text}")
    return lines


# ------------------------------------------------------------------------------------ output
def to_plain(obj: Any) -> Any:
    """Dataclasses/enums/paths -> YAML- and JSON-able builtins (for --dry-run, run.json, manifests)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if hasattr(obj, "to_dict") and not _own_fields_only(obj):
            return to_plain(obj.to_dict())
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not f.name.startswith("_")}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj


def _own_fields_only(obj) -> bool:
    # TrainingArguments (and training/hf_fields.py's copy of its fields) have a to_dict that hides secrets; use it.
    return _ours(type(obj)) and not any(
        c.__name__ in ("TrainingArguments", "HFTrainingFields") for c in type(obj).__mro__)


def to_yaml(obj: Any) -> str:
    import yaml

    return yaml.safe_dump(to_plain(obj), sort_keys=False, allow_unicode=True, width=110)


def missing_paths(obj: Any, prefix: str = "") -> list[str]:
    """'key: path (what is wrong)' for every path-marked field whose path does not exist."""
    out: list[str] = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name, None)
        kind = f.metadata.get("path") if f.metadata else None
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out += missing_paths(value, f"{prefix}{f.name}.")
        elif kind and value:
            p = Path(str(value))
            ok = p.is_dir() if kind == "dir" else p.is_file() if kind == "file" else p.exists()
            if not ok:
                what = {"dir": "no such directory", "file": "no such file"}.get(kind, "does not exist")
                out.append(f"{prefix}{f.name}: {value} ({what})")
    return out


def print_resolved(cfg: Any, logger) -> None:
    """`--dry-run`: warn about path fields that do not exist, print the resolved config as YAML on stdout."""
    import sys

    for problem in missing_paths(cfg):
        logger.warning("path does not exist (a placeholder?): %s", problem)
    sys.stdout.write(to_yaml(cfg))
