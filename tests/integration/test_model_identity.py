"""One ModelId (evalsuite/identity.py) keys the own-task answer cache, the lmms-eval response cache and
store reuse: editing a checkpoint's chat template makes every task of the next `evalsuite run` recompute,
with --rerun and without; and an output directory of the old template is not resumed under the new one."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from evalsuite.cli import main as cli_main


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _edit_chat_template(ckpt: Path, mark: str) -> list[str]:
    """Append a Jinja comment to every chat template file of `ckpt` (the weights stay untouched)."""
    edited = []
    for p in sorted(ckpt.iterdir()):
        if p.name.endswith(".jinja"):
            p.write_text(p.read_text() + f"{{# {mark} #}}")
            edited.append(p.name)
        elif p.suffix == ".json" and "chat_template" in p.read_text():
            data = json.loads(p.read_text())
            if isinstance(data.get("chat_template"), str):
                data["chat_template"] += f"{{# {mark} #}}"
                p.write_text(json.dumps(data))
                edited.append(p.name)
    return edited


def test_edited_chat_template_recomputes_every_task(tiny_vlm_dir, world_dir, tmp_path, monkeypatch, capsys):
    """caption (own task) and pope_random (lmms-eval) on a copy of the tiny checkpoint: run 2 reuses both;
    after the template is edited, run 3 reuses neither and pope_random generates its answers anew (not from
    the response cache); edited again, run 4 with --rerun generates anew as well. The weights' hash and
    the eval_keys stay those of run 1 (the setup is the same), the recorded model id changes."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_vlm_dir, ckpt)
    data = world_dir / "questions" / "pope_val_random.parquet"
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(f"tasks: [caption, pope_random]\nlimit: 2\ndevice: cpu\ngen: {{max_new_tokens: 3}}\n"
                   f"lmms:\n  gen_kwargs: max_new_tokens=3\n  data:\n    pope_random: [{data}]\n")
    store = tmp_path / "store"
    run = ["run", "--config", str(cfg), "--ckpt", str(ckpt), "--data-root", str(world_dir), "--store", str(store)]
    own_cache = store / ".resume" / "own"

    assert cli_main([*run, "--output", str(tmp_path / "o1")]) == 0
    first = _summary(tmp_path / "o1")
    assert first["pope_random"]["extra"]["responses"] == {"generated": 2, "cached": 0}
    assert len(list(own_cache.iterdir())) == 1

    assert cli_main([*run, "--output", str(tmp_path / "o2")]) == 0
    second = _summary(tmp_path / "o2")
    assert second["caption"]["reused"] and second["pope_random"]["reused"]

    assert _edit_chat_template(ckpt, "edited once")
    capsys.readouterr()
    assert cli_main([*run, "--output", str(tmp_path / "o1")]) == 2   # o1 belongs to the run of the old template
    assert "prompt files" in capsys.readouterr().err
    assert cli_main([*run, "--output", str(tmp_path / "o3")]) == 0
    third = _summary(tmp_path / "o3")
    assert "reused" not in third["caption"] and "reused" not in third["pope_random"]
    assert third["pope_random"]["extra"]["responses"] == {"generated": 2, "cached": 0}
    assert len(list(own_cache.iterdir())) == 2           # caption's answers under a new model id
    assert {t: third[t]["eval_key"] for t in third} == {t: first[t]["eval_key"] for t in first}
    runs = [json.loads((tmp_path / o / "run.json").read_text()) for o in ("o1", "o3")]
    assert runs[0]["ckpt_hash"] == runs[1]["ckpt_hash"] and runs[0]["model_id"] != runs[1]["model_id"]

    assert _edit_chat_template(ckpt, "edited twice")
    assert cli_main([*run, "--rerun", "--output", str(tmp_path / "o4")]) == 0
    fourth = _summary(tmp_path / "o4")
    assert fourth["pope_random"]["extra"]["responses"] == {"generated": 2, "cached": 0}
    assert "reused" not in fourth["caption"] and len(list(own_cache.iterdir())) == 3
