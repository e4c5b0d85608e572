"""Generation settings, each declared once: its type, range and help live here, and every class that
generates inherits them, adding only what is its own.

    GenSettings          max_new_tokens, num_beams, temperature, top_p: what every generator reads
      GenOptions         + do_sample, suppress_special_tokens: the eval run's `gen:` section
        GenConfig        + seed: what an own task hands the engine (evalsuite/types.py re-exports it)
      GroupBeamSettings  + num_beam_groups, diversity_penalty, length_penalty: diverse group beam search,
                           the released CSR sampler's defaults
        TreeConfig       the CSR tree search's `tree:` section (training/csr/config.py)
        SearchSpec       the token-level search of one node (training/csr/search.py)

A subclass gives an inherited field its own default, or says which switch reads it, with `own_defaults`
(the type, range and help stay the shared declaration). The classes are frozen, as the search spec and
GenConfig were (values handed to the engines); a narrower one is built from a wider one with `shared`
(`SearchSpec(**shared(tree_cfg, GroupBeamSettings), ...)`), not by copying fields by hand. Only
evalsuite.config is imported, so this stays as light as evalsuite/types.py.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from evalsuite.config import check_fields, opt


def own_defaults(notes: dict[str, str] | None = None, **defaults: Any):
    """Class decorator, placed under `@dataclass`: the inherited fields named in `defaults` get this class's
    default; those in `notes` get their help set in this class's words, "{}" standing for the shared help
    (which switch reads them: {"temperature": "sample: {}"}). Type and range stay the shared declaration."""
    notes = notes or {}

    def wrap(cls):
        inherited = {f.name: f for base in reversed(cls.__mro__[1:]) if dataclasses.is_dataclass(base)
                     for f in dataclasses.fields(base)}
        own = cls.__dict__.get("__annotations__")
        if own is None:
            own = {}
            cls.__annotations__ = own
        for name in (*defaults, *(n for n in notes if n not in defaults)):
            if name not in inherited:
                raise TypeError(f"{cls.__name__}: own_defaults: {name!r} is not an inherited field")
            if name in own:
                raise TypeError(f"{cls.__name__}: {name!r} is declared here and in own_defaults")
            f = inherited[name]
            meta = dict(f.metadata)
            if name in notes:
                meta["help"] = notes[name].replace("{}", meta.get("help", ""))
            if name in defaults or f.default_factory is dataclasses.MISSING:
                new = dataclasses.field(default=defaults.get(name, f.default), metadata=meta)
            else:
                new = dataclasses.field(default_factory=f.default_factory, metadata=meta)
            setattr(cls, name, new)
            own[name] = f.type   # the declared type, as text (from __future__ annotations)
        return cls

    return wrap


def shared(obj: Any, cls: type) -> dict[str, Any]:
    """{field: value} of `obj` for the fields `cls` declares (its bases' included): the settings a
    narrower generation type takes from a wider one."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(cls)}


@dataclass(frozen=True)
class GenSettings:
    """Decoding settings every generator of the project reads."""

    max_new_tokens: int = opt(512, "token cap of one generation (an answer; a tree's sentence)", ge=1)
    num_beams: int = opt(1, "beam search width (1 = no beam search)", ge=1)
    temperature: float = opt(1.0, "sampling temperature", gt=0)
    top_p: float = opt(1.0, "nucleus sampling mass", gt=0, le=1)

    SECTION = ""   # the dotted name errors carry (not a field: no annotation)

    def __post_init__(self) -> None:
        check_fields(self, self.SECTION)


@dataclass(frozen=True)
@own_defaults(notes={"temperature": "{} (read only with do_sample)", "top_p": "{} (read only with do_sample)"})
class GenOptions(GenSettings):
    """Decoding of evalsuite's own tasks: the eval run's `gen:` section (the run's `seed` seeds sampling)."""

    do_sample: bool = opt(False, "sample instead of greedy decoding (seeded by the run's seed)")
    suppress_special_tokens: bool = opt(False, "true = ours: no <image>/pad/BOS in answers (false = plain "
                                              "generate, as lmms-eval's backends and the released code)")

    SECTION = "gen"

    def unread(self) -> list[tuple[str, str, Any, Any]]:
        """Sampling settings under greedy decoding (`GenConfig.as_kwargs` passes them only with do_sample)."""
        return [] if self.do_sample else [(n, "do_sample", False, True) for n in ("temperature", "top_p")]

    def config(self, seed: int) -> GenConfig:
        return GenConfig(**shared(self, GenOptions), seed=seed)


@dataclass(frozen=True)
class GenConfig(GenOptions):
    """Decoding settings of one own task's generation; `as_kwargs()` gives the `generate()` keyword arguments."""

    seed: int = opt(0, "sampling seed (the run's seed)")

    def as_kwargs(self) -> dict:
        kw: dict = {"max_new_tokens": self.max_new_tokens, "do_sample": self.do_sample, "num_beams": self.num_beams}
        if self.do_sample:
            kw.update(temperature=self.temperature, top_p=self.top_p)
        return kw

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
@own_defaults(max_new_tokens=70, num_beams=5)
class GroupBeamSettings(GenSettings):
    """Diverse group beam search (transformers 4.37's, as the released CSR sampler ran it, with its defaults);
    temperature and top_p are read by the sampling expander."""

    num_beam_groups: int = opt(5, "beam groups (5 of 5 = one beam per group); divides num_beams", ge=1)
    diversity_penalty: float = opt(3.0, "Hamming diversity penalty between groups", ge=0)
    length_penalty: float = opt(1.0, "length penalty of the beam scores")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_beams % self.num_beam_groups:
            from evalsuite.errors import UserError

            where = f"{self.SECTION}.num_beam_groups" if self.SECTION else "num_beam_groups"
            raise UserError(f"{where}: must divide num_beams ({self.num_beams})")
