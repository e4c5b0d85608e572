"""docs/settings.md is generated from the field declarations (evalsuite/settings_doc.py): the committed
file must equal a fresh rendering, and a rendering must carry what the declarations say."""
from __future__ import annotations

from pathlib import Path

from evalsuite.settings_doc import COMMAND, render

DOC = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_committed_settings_doc_is_current():
    assert DOC.read_text(encoding="utf-8") == render(), f"docs/settings.md is stale: run `{COMMAND}`"


def _section(text: str, anchor: str) -> str:
    return text.split(f'<a id="{anchor}"></a>', 1)[1].split("<a id=", 1)[0]


def test_rows_carry_the_declared_choices_range_identity_and_help():
    import dataclasses

    from evalsuite.tasks.chair import ChairOptions
    from training.csr.config import TreeConfig

    text = render()
    chair = _section(text, "eval-chair")
    n_boot = next(f for f in dataclasses.fields(ChairOptions) if f.name == "n_boot")
    assert f"| `n_boot` | an int | 1000 | >= 0 | no | {n_boot.metadata['help']} |" in chair
    assert "| `variant` | 'original' \\| 'opera' \\| 'opera_lemma' | 'original' |  |  |" in chair
    tree = _section(text, "csr-tree")
    assert "| `top_p` | a number | 1.0 | in (0, 1] |  |" in tree
    assert "| `batch_nodes` | an int or null | null |  | no |" in tree
    assert len([ln for ln in tree.splitlines() if ln.startswith("| `")]) == len(dataclasses.fields(TreeConfig))
    # a section class shown once: CSR's vllm: and eval: link to the eval config's tables
    csr = _section(text, "csr")
    assert "| `vllm:` | section: [eval-vllm](#eval-vllm) |" in csr
    assert "| `eval:` | section: [eval](#eval) |" in csr
    assert text.count('<a id="eval-vllm"></a>') == 1
