"""Issue 8 end to end: real `evalsuite run` calls on two tiny-checkpoint iterations -> table -> report."""
import json

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_iterations(tmp_path_factory, tiny_vlm_dir):
    """iter 0 = the kit checkpoint; iter 1 = other weights whose manifest names iter 0 as parent."""
    from evalsuite.kit.tiny import build_tiny_vlm
    from evalsuite.manifest import write_manifest

    root = tmp_path_factory.mktemp("iters")
    it1 = build_tiny_vlm(root / "iter_1", seed=1)
    write_manifest(it1, iteration=1, parent=str(tiny_vlm_dir), method="csr", config={"seed": 1})
    return [tiny_vlm_dir, it1]


def test_runs_fill_store_table_and_report(two_iterations, world_dir, tmp_path):
    store = tmp_path / "store"
    for i, ckpt in enumerate(two_iterations):
        res = run_cli("run", "--ckpt", str(ckpt), "--tasks", "caption,chair", "--data-root", str(world_dir),
                      "--store", str(store), "--chair-images", "8", "--limit", "8", "--max-new-tokens", "12",
                      "--label", f"iter{i}")
        assert res.returncode == 0, res.stderr[-3000:]

    res = run_cli("table", "--store", str(store), "--format", "json", "--metric", "chair/*")
    assert res.returncode == 0, res.stderr[-2000:]
    table = json.loads(res.stdout)
    rows = table["rows"] if isinstance(table, dict) else table
    text = json.dumps(rows)
    assert "CHAIRi" in text and "CHAIRs" in text
    assert text.index(str(two_iterations[0].name)) < text.index(str(two_iterations[1].name))  # by iteration

    out = tmp_path / "report"
    res = run_cli("report", "--store", str(store), "--out", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    html = (out / "index.html").read_text()
    for section in ("summary", "iteration", "sample", "provenance"):
        assert section in html.lower()
    import re

    # self-contained: nothing is fetched (XML namespace URIs such as the SVG xmlns are not requests)
    assert not re.search(r"""(?:src|href|url)\s*[=(]\s*["']?(?:https?:)?//""", html)
