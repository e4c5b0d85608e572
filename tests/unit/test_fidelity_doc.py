"""docs/csr-fidelity.md: every row of the switch table names the tests that prove it, and each named test
exists (a row pointing at a renamed or deleted test would claim a proof nobody runs)."""
from __future__ import annotations

import re

from tests.conftest import REPO


def _rows():
    table = (REPO / "docs" / "csr-fidelity.md").read_text().split("## The switches", 1)[1].split("\n## ", 1)[0]
    return [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| What")]


def test_every_row_names_an_existing_test():
    tests = {p.name: p.read_text() for p in (REPO / "tests").rglob("test_*.py")}
    rows = _rows()
    assert len(rows) >= 20
    for row in rows:
        cell = row.strip().strip("|").split("|")[-1]
        named = re.findall(r"`([^`]+)`", cell)
        assert named, row
        current = None
        for ref in named:
            path, _, name = ref.partition("::")
            if path:
                current = path.split("/")[-1]
            assert current in tests, (row[:40], ref)
            if name:
                pattern = re.escape(name).replace(r"\*", r"\w*")
                assert re.search(rf"def {pattern}", tests[current]), (row[:40], ref)


def _lookup(preset: dict, name: str):
    """`name` (e.g. clip_text, tree.image_aspect) in a preset: top level, a dotted path, or one section's key."""
    if "." in name:
        section, key = name.split(".", 1)
        return preset.get(section, {}).get(key, KeyError) if isinstance(preset.get(section), dict) else KeyError
    if name in preset:
        return preset[name]
    hits = [v[name] for v in preset.values() if isinstance(v, dict) and name in v]
    return hits[0] if len(hits) == 1 else KeyError


def test_the_default_column_is_what_the_presets_set():
    """Every `name: value` of a row's preset column that the preset holds has that value there: the page's
    claim that the presets naming the released code set the released values is checked, not only stated."""
    import yaml

    presets = {p: yaml.safe_load((REPO / "configs" / p).read_text()) for p in ("csr.yaml", "train/llava15_7b_dpo.yaml")}
    checked = 0
    for row in _rows():
        cell = row.strip().strip("|").split("|")[-3]
        preset = presets["train/llava15_7b_dpo.yaml" if "llava15_7b_dpo.yaml" in cell else "csr.yaml"]
        for name, value in re.findall(r"`([\w.]+): ([^`]+)`", cell):
            got = _lookup(preset, name)
            if got is KeyError:
                continue
            assert got == yaml.safe_load(value), (row[:40], name, got, value)
            checked += 1
    assert checked >= 10


def test_switch_names_exist():
    """A `tree.` / `reward.` / `pairs.` name in the table is a field of that section (a renamed switch fails)."""
    import dataclasses

    from training.csr.config import PairConfig, RewardConfig, TreeConfig

    fields = {s: {f.name for f in dataclasses.fields(c)} for s, c in
              (("tree", TreeConfig), ("reward", RewardConfig), ("pairs", PairConfig))}
    named = [m for row in _rows() for m in re.findall(r"`(tree|reward|pairs)\.(\w+)", row)]
    assert len(named) >= 8
    for section, name in named:
        assert name in fields[section], (section, name)
