"""The evaluation workflow end to end, as a user chains it: real `evalsuite run` calls on two tiny-checkpoint iterations -> table -> report."""
import json

import pytest

from tests.conftest import cli_inprocess, run_cli

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
    from tests.unit.test_report import section

    # the sections are filled from these two runs (their ids and nav links are static template text)
    for sec in ("summary", "iterations", "samples", "provenance"):
        assert 'class="empty"' not in section(html, sec), sec
    summary = section(html, "summary")
    assert 'data-metric="CHAIRi"' in summary and 'data-metric="CHAIRs"' in summary
    assert summary.index("iter0") < summary.index("iter1")   # a column per checkpoint, by iteration
    assert section(html, "samples").count('class="sample item"') >= 8     # the 8 captioned images
    import re

    # self-contained: nothing is fetched (XML namespace URIs such as the SVG xmlns are not requests)
    assert not re.search(r"""(?:src|href|url)\s*[=(]\s*["']?(?:https?:)?//""", html)


def test_two_prompts_and_two_image_counts_stay_apart(two_iterations, world_dir, tmp_path):
    """One checkpoint evaluated with --prompt A and B, and with --chair-images 4 and 8: each way is its
    own row in `evalsuite table` and in the report, labelled by what differs, and iter1's delta is
    taken against iter0's row of the same setup only (prompt A, 4 images). The commands run in this
    process (conftest.cli_inprocess: 7 launches' imports saved); the test above runs the real processes."""
    store = tmp_path / "store"
    runs = [(0, "caption,chair", "Describe the image.", "4"), (0, "caption,chair", "What is in the picture?", "4"),
            (0, "chair", "Describe the image.", "8"), (1, "caption,chair", "Describe the image.", "4")]
    for i, tasks, prompt, n in runs:
        res = cli_inprocess("run", "--ckpt", str(two_iterations[i]), "--tasks", tasks, "--data-root", str(world_dir),
                      "--store", str(store), "--chair-images", n, "--limit", "8", "--max-new-tokens", "8",
                      "--prompt", prompt, "--label", f"iter{i}")
        assert res.returncode == 0, res.stderr[-3000:]

    res = cli_inprocess("table", "--store", str(store), "--format", "json", "--metric", "CHAIRi",
                  "--metric", "answer_words_mean")
    assert res.returncode == 0, res.stderr[-2000:]
    rows = json.loads(res.stdout)["rows"]
    got = [(r["checkpoint"], r["task"], r["setup"], r["delta"] is not None) for r in rows]
    assert got == [
        ("iter0", "caption", "prompt='Describe the image.'", False),
        ("iter0", "caption", "prompt='What is in the picture?'", False),
        ("iter0", "chair", "prompt='Describe the image.', n_images=4", False),
        ("iter0", "chair", "prompt='What is in the picture?', n_images=4", False),
        ("iter0", "chair", "prompt='Describe the image.', n_images=8", False),
        ("iter1", "caption", "prompt='Describe the image.'", True),
        ("iter1", "chair", "prompt='Describe the image.', n_images=4", True),
    ]
    assert rows[6]["delta"] == pytest.approx(rows[6]["value"] - rows[2]["value"])
    assert rows[5]["delta"] == pytest.approx(rows[5]["value"] - rows[0]["value"])
    assert len({r["eval_key"] for r in rows}) == 5 and [r["n"] for r in rows[2:5]] == [4, 4, 8]

    md = cli_inprocess("table", "--store", str(store), "--metric", "chair/CHAIRi")
    assert md.returncode == 0 and md.stdout.count("| iter0") == 3 and md.stdout.count("| iter1") == 1
    assert "n_images=8" in md.stdout and "(n=8)" in md.stdout and f"data {world_dir}" in md.stdout

    out = tmp_path / "report"
    assert cli_inprocess("report", "--store", str(store), "--out", str(out)).returncode == 0
    html = (out / "index.html").read_text()
    assert html.count('<td data-v="CHAIRi') == 3 and "n_images=8</span>" in html
    assert "prompt=&#39;What is in the picture?&#39;" in html
