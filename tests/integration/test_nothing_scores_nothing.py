"""Numbers computed from nothing never reach the store: a task whose answers are (mostly) empty, own or
lmms-eval's, fails in one line naming the task and a sample, and a CSR iteration without pairs says why in
one line. Under several ranks: tests/unit/test_empty_answers_ranks.py, tests/integration/test_empty_answers_ranks.py."""
from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _mute(src: Path, out: Path) -> Path:
    """A copy of the tiny LLaVA whose LM head is all zeros: every logit ties, the suppressed pad and BOS
    (ids 0, 1) are skipped and greedy decoding picks EOS (id 2) first, so every answer is empty."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(src, out)
    weights = load_file(out / "model.safetensors")
    head = [k for k in weights if k.endswith("lm_head.weight")]
    assert head, sorted(weights)[:5]
    for k in head:
        weights[k].zero_()
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    return out


def test_all_empty_answers_fail_the_task_and_store_nothing(tiny_vlm_dir, world_dir, punkt_dir, tmp_path):
    # in this process (conftest.cli_inprocess; punkt_dir is on NLTK's path here): the lmms-eval case below
    # and tests/integration/test_empty_answers_ranks.py run the real processes
    from tests.conftest import cli_inprocess

    ckpt = _mute(tiny_vlm_dir, tmp_path / "mute")
    store, out = tmp_path / "store", tmp_path / "out"
    res = cli_inprocess("run", "--ckpt", str(ckpt), "--tasks", "chair", "--data-root", str(world_dir), "--limit",
                        "4", "--max-new-tokens", "4", "--output", str(out), "--store", str(store), "--device", "cpu",
                        "chair.n_images=4", "chair.n_boot=10")
    assert res.returncode != 0, res.stderr[-2000:]
    last = res.stderr.strip().splitlines()[-1]
    assert "chair: 4 of 4 answers are empty" in last and "Sample: image" in last, res.stderr[-2000:]
    assert not list(store.rglob("*.parquet"))  # nothing stored, not even a CHAIR of 0
    assert not (out / "chair" / "samples.jsonl").exists()
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    assert "chair" not in summary


def test_the_empty_answer_rule_allows_up_to_the_stated_share():
    import re

    from evalsuite.tasks.answers import MAX_EMPTY_SHARE, answers_failure

    assert MAX_EMPTY_SHARE == 0.5
    assert answers_failure("caption", [{"answer": "a dog"}, {"answer": " "}]) is None  # half empty: allowed
    message = answers_failure("caption", [{"answer": "a dog"}, {"answer": "", "image_id": 7, "prompt": "q"},
                                          {"answer": ""}])
    assert re.match(r"^caption: 2 of 3 answers are empty .* Sample: image 7", message)


def test_csr_iteration_without_pairs_says_why(tiny_vlm_dir, tiny_clip_dir, world_dir, tmp_path):
    import pytest

    from evalsuite.errors import RunFailure
    from training.csr.config import load_config
    from training.csr.loop import run_csr

    images = world_dir / "images" / "train"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": p.stem, "image": p.name, "question": "Describe the image."}) + "\n"
                               for p in sorted(images.iterdir())[:2]))
    overrides = [f"model={tiny_vlm_dir}", f"clip={tiny_clip_dir}", f"prompts={prompts}", f"image_root={images}",
                 f"output_dir={tmp_path / 'run'}", f"store={tmp_path / 'store'}", "iterations=1",
                 "tree.max_depth=1", "tree.max_new_tokens=4", "pairs.min_paths=99"]
    with pytest.raises(RunFailure) as exc:
        run_csr(load_config(REPO / "configs" / "csr_tiny.yaml", overrides))
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("iteration 1: no preference pairs from 2 trees (") and "too_few_paths=2" in msg, msg
    assert not list((tmp_path / "store").rglob("*.parquet"))


def test_lmms_tasks_of_an_all_empty_checkpoint_fail_and_store_nothing(tiny_vlm_dir, world_dir, tmp_path):
    """POPE, then MME, through lmms-eval on the mute checkpoint: evalsuite's adapter answered every request
    with "" (lmms-eval would score POPE's as "no": accuracy 0.5, MME's as 0 per category); each run fails
    in one line naming the task, the count and a sample, stores nothing, and stops there: `pope,mme`
    never starts MME (the same rule and message as own tasks)."""
    from tests.conftest import run_cli

    ckpt = _mute(tiny_vlm_dir, tmp_path / "mute")
    store = tmp_path / "store"
    env = {"HF_HOME": str(tmp_path / "hf"), "LM_HARNESS_CACHE_PATH": str(tmp_path / "req")}
    for tasks, failing in (("pope,mme", "pope"), ("mme", "mme")):
        out = tmp_path / f"out-{failing}"
        res = run_cli("run", "--ckpt", str(ckpt), "--tasks", tasks, "--data-root", str(world_dir), "--limit", "8",
                      "--gen-kwargs", "max_new_tokens=4", "--output", str(out), "--store", str(store),
                      "--device", "cpu", env=env)
        assert res.returncode == 1, res.stderr[-2000:]
        last = res.stderr.strip().splitlines()[-1]
        assert last.startswith(f"evalsuite: failed: {failing}: 8 of 8 answers are empty (more than 50%); nothing "
                               "stored for it and the run stops here (tasks finished before it stay stored). "
                               "Sample: doc 0, prompt '"), res.stderr[-2000:]
        assert last.endswith("-> answer ''"), last
        assert not list(store.rglob("*.parquet"))  # no accuracy of empty answers
        assert not (out / failing).exists() and not (out / "lmms_results.json").exists()
        assert not (json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {})
        assert "lmms-eval task mme" not in res.stderr or failing == "mme"
