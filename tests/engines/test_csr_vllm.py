"""A CSR iteration whose trees grow on vLLM (`tree.expander: sample`, `tree.engine: vllm`): valid trees, a
trained checkpoint (training/csr/vllm_expand.py, docs/engines.md "CSR trees on vLLM")."""
from __future__ import annotations

from pathlib import Path


def test_csr_sample_iteration_on_vllm(vllm_ckpts, tiny_clip_dir, world_dir, tmp_path):
    """One CSR iteration with `tree.expander: sample` on vLLM (`tree.engine: vllm`) grows valid trees (every
    expanded node has num_samples children, each sentence ends at a stop id or the token cap, scores are
    mean log-probs <= 0) and trains a checkpoint."""
    import json

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
                 f"output_dir={tmp_path / 'run'}", f"store={tmp_path / 'store'}", "iterations=1",
                 "tree.expander=sample", "tree.engine=vllm", "tree.num_samples=4"]
    merged = run_csr(load_config(repo / "configs" / "csr_tiny.yaml", overrides))
    it1 = tmp_path / "run" / "iter_1"
    trees = read_trees(it1 / "trees.jsonl")
    assert len(trees) == 4
    tok = load_vlm(ckpt).tokenizer
    stops = set(sentence_end_ids(tok, [".", "!", "?"])) | {tok.eos_token_id}
    for tree in trees:
        expanded = [n for n in tree.nodes if n.status == "expanded" or n.children]
        assert expanded and tree.nodes[0].children
        for n in expanded:
            assert len(n.children) >= 1
        for n in tree.nodes[1:]:
            ids = n.sentence_ids
            assert ids and (ids[-1] in stops or len(ids) == 12)
            assert not any(t in stops for t in ids[:-1])
            assert n.sentence_score <= 0
    assert (it1 / "vllm_worker.log").is_file()
    assert merged and (Path(merged[0]) / "config.json").is_file()
    load_vlm(merged[0])
