"""CSR iterations whose trees grow on vLLM (`tree.expander: sample`, `tree.engine: vllm`): valid trees, and
iteration 2 served from evalsuite's own merged checkpoint; `evalsuite run --engine vllm` on that DPO output
stores HF's scores and answers, both engines stopping at the model's context (training/csr/vllm_expand.py,
docs/engines.md)."""
from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli


def _results(out: Path, tasks: list[str]) -> dict:
    found = {}
    for name in tasks:
        res = json.loads((out / name / "result.json").read_text())
        samples = [json.loads(line) for line in (out / name / "samples.jsonl").read_text().splitlines()]
        found[name] = {"metrics": {m["metric"]: m["value"] for m in res["metrics"]},
                       "answers": [s.get("answer") for s in samples]}
    return found


def test_csr_two_iterations_on_vllm_then_its_dpo_output_serves_as_hf(vllm_spec, vllm_ckpts, tiny_clip_dir, world_dir,
                                                                     tmp_path):
    """Two CSR iterations with `tree.expander: sample` on vLLM grow valid trees (every expanded node has
    children, each sentence ends at a stop id or the token cap, scores are mean log-probs <= 0); iteration 2's
    worker serves iteration 1's merged checkpoint. Then captions of that DPO output, with answers
    of up to 512 new tokens on a 512-token model: `--engine vllm` stores `--engine hf`'s scores and answers,
    and some answer ran into the context (neither engine goes past it)."""
    from evalsuite.models.vlm import load_vlm
    from training.csr.config import load_config
    from training.csr.generate import read_trees, sentence_end_ids
    from training.csr.loop import run_csr

    repo = Path(__file__).resolve().parents[2]
    images = world_dir / "images" / "train"
    files = sorted(images.iterdir())[:4]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": p.stem, "image": p.name, "question": "Describe the image."}) + "\n"
                               for p in files))
    ckpt = vllm_ckpts["llava"]
    overrides = [f"model={ckpt}", f"clip={tiny_clip_dir}", f"prompts={prompts}", f"image_root={images}",
                 f"output_dir={tmp_path / 'run'}", f"store={tmp_path / 'store'}", "iterations=2",
                 "tree.expander=sample", "tree.engine=vllm", "tree.num_samples=4", f"vllm.python={vllm_spec.python}"]
    merged = run_csr(load_config(repo / "configs" / "csr_tiny.yaml", overrides))
    assert len(merged) == 2
    tok = load_vlm(ckpt).tokenizer
    stops = set(sentence_end_ids(tok, [".", "!", "?"])) | {tok.eos_token_id}
    for t in (1, 2):
        it = tmp_path / "run" / f"iter_{t}"
        trees = read_trees(it / "trees.jsonl")
        assert len(trees) == 4
        for tree in trees:
            expanded = [n for n in tree.nodes if n.status == "expanded" or n.children]
            assert expanded and tree.nodes[0].children
            for n in tree.nodes[1:]:
                ids = n.sentence_ids
                assert ids and (ids[-1] in stops or len(ids) == 12)
                assert not any(s in stops for s in ids[:-1])
                assert n.sentence_score <= 0
        assert (it / "vllm_worker.log").is_file()
    assert str(merged[0]) in (tmp_path / "run" / "iter_2" / "vllm_worker.log").read_text()  # served iter 1's

    dpo, tasks = merged[0], ["caption"]
    env = {"EVALSUITE_VLLM_PYTHON": vllm_spec.python}
    for engine in ("hf", "vllm"):
        r = run_cli("run", "--ckpt", str(dpo), "--data-root", str(world_dir), "--tasks", ",".join(tasks), "--engine",
                    engine, "--store", str(tmp_path / "evals"), "--output", str(tmp_path / engine), "--limit", "3",
                    "--batch-size", "3", env=env, timeout=1200)
        assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "vllm" / "vllm_worker.log").is_file()   # OUT/vllm_worker.log (docs/engines.md)
    ours, ref = _results(tmp_path / "vllm", tasks), _results(tmp_path / "hf", tasks)
    assert ours == ref
    dpo_tok = load_vlm(dpo).tokenizer
    lengths = [len(dpo_tok(a, add_special_tokens=False)["input_ids"]) for t in tasks for a in ref[t]["answers"]]
    assert max(lengths) > 512 - 100 and max(lengths) < 512  # cut by the context (prompts are < 100 tokens)
