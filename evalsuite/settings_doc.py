"""docs/settings.md, generated from the field declarations (`opt(...)`: help, Literal choices, ranges,
`identity`), so the docs say what `--help` says and what the loader checks:

    python -m evalsuite.settings_doc > docs/settings.md

tests/unit/test_settings_doc.py regenerates it and compares it with the committed file.
"""
from __future__ import annotations

import dataclasses
import sys
import typing

from evalsuite.config import _choices, _describe, _range, _typed_fields

COMMAND = "python -m evalsuite.settings_doc > docs/settings.md"

HEADER = f"""# Settings

Every setting of the three configurations: `evalsuite run` (the eval config), `training/train.py`
(sft/dpo: the training config) and the CSR loop (`--method csr`). GENERATED from the field declarations
by `{COMMAND}`; do not edit (tests/unit/test_settings_doc.py fails when it is stale). How settings are
given (YAML preset < command line, `--flag value`, `section.key=value`): README, evalsuite/config.py.

Columns: **type** (the choices of a fixed list; `null` where the field may be unset), **default**,
**range** (checked when the config loads), **identity** (`no`: declared `identity=False`, a setting of
speed or scheduling that never changes a result, left out of the identity of the results that read it:
evalsuite/identity.py; in a task's section, and in a CSR stage's, every other field is part of it),
**help** (what `--help` prints).
"""


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _type(tp) -> str:
    choices = _choices(tp)
    if choices:
        shown = choices[len(" (one of: "):-1]
        return shown + (" or null" if type(None) in typing.get_args(tp) else "")
    return _describe(tp)


def _default(f) -> str:
    if f.default is not dataclasses.MISSING:
        return "null" if f.default is None else repr(f.default) if isinstance(f.default, str) else \
            str(f.default).lower() if isinstance(f.default, bool) else str(f.default)
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return str(f.default_factory())  # type: ignore[misc]
    return "required"


def _row(name: str, f, tp, fields_at: str = "") -> str:
    """A field's row; a section's (`fields_at`: the link to its table) has no default of its own."""
    meta = f.metadata or {}
    cells = [f"`{name}`", "section: " + fields_at if fields_at else _type(tp), "" if fields_at else _default(f),
             _range(f)[2:-1], "no" if meta.get("identity") is False else "", meta.get("help", "")]
    return "| " + " | ".join(_cell(c) if i else c for i, c in enumerate(cells)) + " |"


def _anchor(config: str, section: str) -> str:
    return f"{config}-{section.replace('.', '-')}" if section else config


def _tables(config: str, title: str, cls, seen: dict, split: tuple | None = None) -> list[str]:
    """One table for the top-level fields of `cls` (two where `split` = (base class, its title)), then
    one per typed section; a section class rendered before is a link to that table."""
    groups: dict[str, list] = {"": []}
    heads: dict[str, tuple] = {}
    skip: list[str] = []
    for key, f, sub, tp in _typed_fields(cls):
        if any(key.startswith(s + ".") for s in skip):
            continue
        parent, _, name = key.rpartition(".")
        if sub is not None:
            heads[key] = (f, sub)
            if sub in seen:
                skip.append(key)
            else:
                seen[sub] = _anchor(config, key)
                groups[key] = []
        groups[parent].append((name, f, sub, tp))
    out = [f'<a id="{config}"></a>', f"## {title}", ""]
    for section, rows in groups.items():
        if section:
            f, sub = heads[section]
            out += [f'<a id="{_anchor(config, section)}"></a>', f"### `{section}:` ({config} config)", "",
                    _cell(f.metadata.get("help", "")) + f" ({sub.__module__}.{sub.__qualname__})", ""]
        parts = [("", rows)]
        if split and not section:
            base = {f.name for f in dataclasses.fields(split[0])}
            own = [r for r in rows if r[0] not in base or r[0] in cls.__dict__.get("__annotations__", {})]
            parts = [("", own), (split[1], [r for r in rows if r not in own])]
        for sub_title, part in parts:
            if sub_title:
                out += [f"### {sub_title}", ""]
            out += ["| key | type | default | range | identity | help |", "|---|---|---|---|---|---|"]
            for name, f, sub, tp in part:
                if sub is not None:   # its fields: its own table, or the table of the same class above
                    out.append(_row(name + ":", f, tp, f"[{seen[sub]}](#{seen[sub]})"))
                else:
                    out.append(_row(name, f, tp))
            out.append("")
    return out


def render() -> str:
    """The whole of docs/settings.md."""
    from evalsuite.run_config import eval_config_class
    from training.config import TrainConfig
    from training.csr.config import CSRConfig
    from training.hf_fields import HFTrainingFields

    seen: dict = {}
    eval_cls = eval_config_class()
    seen[eval_cls] = "eval"
    seen[TrainConfig] = "train"   # CSR's `train:` takes these fields (checked when the preset loads)
    lines = [HEADER]
    lines += _tables("eval", "Eval config (`evalsuite run`; evalsuite/run_config.py, each task's Options)",
                     eval_cls, seen)
    lines += _tables("train", "Training config (`training/train.py --method sft|dpo`; training/config.py)",
                     TrainConfig, seen, (HFTrainingFields, "transformers `TrainingArguments` fields "
                                                           "(training/hf_fields.py)"))
    lines += _tables("csr", "CSR config (`training/train.py --method csr`; training/csr/config.py)", CSRConfig, seen)
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
