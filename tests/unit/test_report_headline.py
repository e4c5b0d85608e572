"""The report's headline names what moved: the metrics significantly better and those significantly worse,
per task (the demo's story is a trade-off: CHAIR falls while POPE gets worse), not a bare count."""
import re
from pathlib import Path

from evalsuite.report import build_report
from evalsuite.store import Store
from tests.report_data import chair_result, image, pope_result


def _tradeoff_store(root: Path) -> Store:
    """Base: half the 40 captions hallucinate, POPE all right; iteration 1: no caption hallucinates, POPE
    says "yes" to every question (half of them wrong)."""
    store = Store(root / "store")
    imgs = [image(root / "world" / "images" / f"val_{i:03d}.png", (6 * i % 255, 140, 200 - 4 * i)) for i in range(40)]
    truth = ["yes" if i % 2 == 0 else "no" for i in range(60)]
    for it, (hal, pope) in enumerate(((set(range(0, 40, 2)), truth), (set(), ["yes"] * 60))):
        meta = {"ckpt": f"/ckpts/iter{it}", "ckpt_hash": f"{it:064x}", "iteration": it,
                "parent": "/ckpts/iter0" if it else None, "method": "csr" if it else "sft",
                "label": "demo/base" if it == 0 else "demo/iter_1", "data_root": str(root / "world"),
                "config": {"x": 1}}
        store.write_run(meta, [chair_result(imgs, hal), pope_result(pope)])
    return store


def _lead(html: str) -> str:
    m = re.search(r'<p class="lead">(.*?)</p>', html, re.S)
    return re.sub(r"<[^>]+>", "", re.sub(r"\s+", " ", m.group(1)))


def test_headline_names_the_metrics_better_and_worse(tmp_path):
    html = build_report(_tradeoff_store(tmp_path), tmp_path / "r").read_text()
    lead = _lead(html)
    assert lead.startswith("From demo/base to demo/iter_1 (iteration 1): significantly better: chair: "), lead
    better, worse = lead.split(" — ")[:2]
    assert "CHAIRs" in better and "CHAIRi" in better and "pope" not in better
    assert worse.startswith("significantly worse: pope: ") and "pope_accuracy" in worse and "CHAIR" not in worse
    assert not re.search(r"\d+ metrics? significantly", lead)     # no bare count


def test_headline_says_when_nothing_got_worse():
    from evalsuite.report.summary import headline_sentence

    e = {"name": "CHAIRi", "task": "chair"}
    h = {"better": [e], "worse": [], "changed": [], "ns": [{}, {}], "noci": [{}]}
    assert headline_sentence(h) == ("significantly better: chair: CHAIRi — nothing significantly worse "
                                    "(2 changed within noise, 1 without a CI)")
