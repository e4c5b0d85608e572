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
