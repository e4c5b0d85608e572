"""Expected outputs of transformers 4.37.2's diverse group beam search (the search the released CSR
sampler ran: `generate(num_beams=5, num_beam_groups=5, diversity_penalty=3.0, num_return_sequences=5,
eos_token_id=<".">)`), for tests/unit/test_csr_groupbeam_reference.py.

transformers 5 no longer has group beam search, so this runs in a scratch venv with transformers==4.37.2
(numpy<2, tokenizers 0.15) that borrows the project's torch through a `.pth` file, e.g.

    python3.11 -m venv /tmp/hf437 && /tmp/hf437/bin/pip install transformers==4.37.2 "numpy<2"
    mkdir /tmp/hf437/borrow && ln -s <project venv>/site-packages/{torch,torch-*.dist-info,...} /tmp/hf437/borrow/
    echo /tmp/hf437/borrow > /tmp/hf437/lib/python3.11/site-packages/zz_borrow_torch.pth

Subcommands:
  lms          (4.37.2 venv)   -> lms.json: tiny random Llamas x prompts, HF's 5 sequences and scores
  tree-inputs  (project venv)  -> DIR: the kit's tiny LLaVA language model (4.37 key names) and, per
                                  prompt record, the embeddings the LLaVA feeds its language model
  tree         (4.37.2 venv)   -> tree.json: CSR trees grown by calling HF's group beam search node by
                                  node on those embeddings (the released sampler's loop, sample.py)

The tiny Llamas are not saved: `build_lm` fills every parameter from a seeded generator by name, the
same under transformers 4.37.2 and 5 (lms.json records probe logits; the test checks them first).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Tiny Llamas. Small vocabularies and peaky random heads make the stop token likely enough that
# groups finish at many different steps; `pad` None = generate's fallback to the stop id.
MODELS = [
    {"seed": 11, "vocab": 16, "hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2, "std": 0.35, "stop": 5, "pad": 0, "max_new_tokens": 10, "length_penalty": 1.0},
    {"seed": 12, "vocab": 24, "hidden": 32, "layers": 1, "heads": 4, "kv_heads": 4, "std": 0.5, "stop": 3, "pad": 1, "max_new_tokens": 14, "length_penalty": 1.0},
    {"seed": 13, "vocab": 12, "hidden": 16, "layers": 2, "heads": 2, "kv_heads": 1, "std": 0.25, "stop": 7, "pad": None, "max_new_tokens": 8, "length_penalty": 1.0},
    {"seed": 14, "vocab": 32, "hidden": 24, "layers": 2, "heads": 2, "kv_heads": 2, "std": 0.6, "stop": 9, "pad": 0, "max_new_tokens": 20, "length_penalty": 1.0},
    {"seed": 15, "vocab": 20, "hidden": 32, "layers": 1, "heads": 4, "kv_heads": 2, "std": 0.4, "stop": 2, "pad": 0, "max_new_tokens": 12, "length_penalty": 0.7},
]
PROMPTS_PER_MODEL = 64
SEARCH = {"num_beams": 5, "num_beam_groups": 5, "diversity_penalty": 3.0}
# Other beam layouts through the same scorer (S = beams per group > 1: its heap, done test and order),
# on the first prompts of the first two models.
OTHER_SEARCHES = [{"num_beams": 5, "num_beam_groups": 1, "diversity_penalty": 0.0},
                  {"num_beams": 10, "num_beam_groups": 5, "diversity_penalty": 3.0}]
OTHER_PROMPTS = 24


def build_lm(spec: dict):
    """A random LlamaForCausalLM whose weights depend only on `spec` (not on the transformers version):
    parameters are drawn in sorted-name order from one seeded generator."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=spec["vocab"], hidden_size=spec["hidden"], intermediate_size=2 * spec["hidden"],
                      num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"],
                      num_key_value_heads=spec["kv_heads"], max_position_embeddings=128,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    gen = torch.Generator().manual_seed(spec["seed"])
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            p.copy_(1.0 + 0.1 * noise if name.endswith("norm.weight") else noise * spec["std"])
    return model


def prompts(spec: dict) -> list[list[int]]:
    import torch

    gen = torch.Generator().manual_seed(1000 + spec["seed"])
    out = []
    for _ in range(PROMPTS_PER_MODEL):
        n = int(torch.randint(2, 9, (1,), generator=gen))
        ids = torch.randint(0, spec["vocab"], (n,), generator=gen).tolist()
        out.append([i if i != spec["stop"] else (i + 1) % spec["vocab"] for i in ids])
    return out


def probe(model, spec: dict) -> list[float]:
    """Last-position logits of a fixed input: equal under both transformers versions iff the weights are."""
    import torch

    ids = torch.arange(6).remainder(spec["vocab"])[None]
    with torch.no_grad():
        return [round(float(x), 6) for x in model(ids).logits[0, -1]]


def strip(gen_ids: list[int], stop: int) -> list[int]:
    """HF's returned row -> the hypothesis: up to its first stop (finalize appends the stop after a
    hypothesis that ended on it, then pads), or all max_new_tokens ids when it never stopped."""
    return gen_ids[:gen_ids.index(stop) + 1] if stop in gen_ids else gen_ids


def hf_group_beam(model, input_ids=None, inputs_embeds=None, *, stop, pad, max_new_tokens, length_penalty=1.0,
                  search=None):
    import torch

    # with inputs_embeds, generate() starts from an empty id tensor that it builds with a bos id (any id)
    search = search or SEARCH
    kw = {"input_ids": input_ids} if input_ids is not None else {"inputs_embeds": inputs_embeds, "bos_token_id": 0}
    n = (input_ids if input_ids is not None else inputs_embeds).shape[1]
    with torch.no_grad():
        out = model.generate(**kw, attention_mask=torch.ones((1, n), dtype=torch.long), do_sample=False,
                             **search, num_return_sequences=search["num_beams"], eos_token_id=stop, pad_token_id=pad,
                             max_new_tokens=max_new_tokens, length_penalty=length_penalty,
                             output_scores=True, return_dict_in_generate=True)
    skip = n if input_ids is not None else 1  # with inputs_embeds, sequences are that bos id + the new ids
    seqs = [strip(s[skip:].tolist(), stop) for s in out.sequences]
    return seqs, [float(x) for x in out.sequences_scores]


def cmd_lms(out: Path) -> None:
    import torch
    import transformers

    assert transformers.__version__ == "4.37.2", transformers.__version__
    torch.set_num_threads(1)
    models, cases = [], []
    for mi, spec in enumerate(MODELS):
        model = build_lm(spec)
        models.append({**spec, "probe_logits": probe(model, spec)})
        for ids in prompts(spec):
            seqs, scores = hf_group_beam(model, torch.tensor([ids]), stop=spec["stop"], pad=spec["pad"],
                                         max_new_tokens=spec["max_new_tokens"], length_penalty=spec["length_penalty"])
            cases.append({"model": mi, "prompt": ids, "ids": seqs, "scores": [round(s, 7) for s in scores]})
        for search in OTHER_SEARCHES if mi < 2 else []:
            for ids in prompts(spec)[:OTHER_PROMPTS]:
                seqs, scores = hf_group_beam(model, torch.tensor([ids]), stop=spec["stop"], pad=spec["pad"],
                                             max_new_tokens=spec["max_new_tokens"],
                                             length_penalty=spec["length_penalty"], search=search)
                cases.append({"model": mi, "search": search, "prompt": ids, "ids": seqs,
                              "scores": [round(s, 7) for s in scores]})
    doc = {"made_by": "tests/data/csr_groupbeam/make_reference.py lms", "transformers": transformers.__version__,
           "torch": torch.__version__, "search": SEARCH, "models": models, "cases": cases}
    out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"{len(cases)} cases -> {out}")



# --- the CSR tree on the kit's tiny LLaVA, node by node -----------------------------------------------

# TreeConfig(max_new_tokens=10, max_depth=4, max_chars=None, period_id=159, released rest): the random tiny
# LLaVA almost never says ".", so a token it often generates stands in for it and sentences end at
# many different lengths.
TREE = {"max_new_tokens": 10, "max_depth": 4, "period_id": 159}
TREE_RECORDS = [{"id": f"t{i}", "image": f"{i}.png", "question": q} for i, q in
                enumerate(["Describe the image.", "What is in the picture?", "Describe the image in detail."])]


def make_images(root: Path) -> Path:
    """Three solid-colour 32 px PNGs (the test writes the same ones)."""
    from PIL import Image

    root.mkdir(parents=True, exist_ok=True)
    for i, rgb in enumerate([(200, 40, 40), (30, 160, 90), (60, 60, 220)]):
        Image.new("RGB", (32, 32), rgb).save(root / f"{i}.png")
    return root


def cmd_tree_inputs(out: Path) -> None:
    """Project venv: the kit's tiny LLaVA (seed 0, as tests/conftest.py builds it), its language model's
    weights under LlamaForCausalLM names, and per record the prompt ids and the input embeddings the
    LLaVA gives its language model at the prefill (text embeddings with the image features placed)."""
    from safetensors.torch import save_file

    from evalsuite.kit.tiny import build_tiny_vlm
    from evalsuite.models.vlm import load_vlm
    from training.csr.generate import encode_prompt
    from training.csr.search import _Batch

    out.mkdir(parents=True, exist_ok=True)
    vlm = load_vlm(build_tiny_vlm(out / "tiny-vlm", seed=0), device="cpu")
    images = make_images(out / "images")
    lm = vlm.model.model.language_model
    seen = {}
    hook = lm.register_forward_pre_hook(lambda mod, args, kw: seen.__setitem__("e", kw["inputs_embeds"].detach().clone()),
                                        with_kwargs=True)
    tensors, records = {}, []
    for i, rec in enumerate(TREE_RECORDS):
        ids, feats = encode_prompt(vlm, images, rec["image"], rec["question"])
        _Batch(vlm.model, [ids], [feats], vlm.tokenizer.pad_token_id, 1)  # the search's own prefill
        tensors[f"embeds.{i}"] = seen["e"][0].float().contiguous()
        records.append({**rec, "prompt_ids": ids})
    hook.remove()
    tensors.update({f"model.{k}": v.float().contiguous() for k, v in lm.state_dict().items()})
    tensors["lm_head.weight"] = vlm.model.lm_head.weight.detach().float().contiguous()
    save_file(tensors, str(out / "tensors.safetensors"))
    tc = vlm.model.config.text_config
    rope = getattr(tc, "rope_theta", None) or (getattr(tc, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    tok = vlm.tokenizer
    meta = {"config": {"vocab_size": tc.vocab_size, "hidden_size": tc.hidden_size,
                       "intermediate_size": tc.intermediate_size, "num_hidden_layers": tc.num_hidden_layers,
                       "num_attention_heads": tc.num_attention_heads, "num_key_value_heads": tc.num_key_value_heads,
                       "max_position_embeddings": tc.max_position_embeddings, "rms_norm_eps": tc.rms_norm_eps,
                       "rope_theta": float(rope)},
            "period_id": tok.convert_tokens_to_ids("."), "eos_id": tok.eos_token_id, "pad_id": tok.pad_token_id,
            "records": records, "dtype": str(vlm.model.dtype)}
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    print(f"tree inputs -> {out}")


def _check_embeds_path() -> None:
    """generate(inputs_embeds=...) equals generate(input_ids=...) on a tiny Llama (the tree drives
    4.37.2 through embeddings, as the LLaVA's image features cannot be given as ids)."""
    import torch

    spec = MODELS[0]
    model = build_lm(spec)
    for ids in prompts(spec)[:8]:
        x = torch.tensor([ids])
        kw = {"stop": spec["stop"], "pad": spec["pad"], "max_new_tokens": spec["max_new_tokens"]}
        by_ids = hf_group_beam(model, x, **kw)
        by_emb = hf_group_beam(model, inputs_embeds=model.get_input_embeddings()(x), **kw)
        assert by_ids[0] == by_emb[0] and all(abs(a - b) < 1e-5 for a, b in zip(by_ids[1], by_emb[1])), (ids, by_ids, by_emb)


def cmd_tree(inputs: Path, out: Path) -> None:
    """4.37.2 venv: grow each record's tree the way the released sampler does (sample.py's
    sentence_level_beam_search_tree): expand every active node with one `generate` call on prompt +
    response so far, children in returned order with score = parent + sequences_score, final at EOS in
    the new ids (or at depth max_depth: the test sets no character cap), then keep the best
    int(5/2)-1 and the worst int(5/2) of the depth's non-final children when there are >= 5."""
    import torch
    import transformers
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    assert transformers.__version__ == "4.37.2", transformers.__version__
    torch.set_num_threads(1)
    _check_embeds_path()
    meta = json.loads((inputs / "meta.json").read_text())
    tensors = load_file(str(inputs / "tensors.safetensors"))
    c = meta["config"]
    model = LlamaForCausalLM(LlamaConfig(**c, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                                         pad_token_id=None)).eval()
    model.load_state_dict({k: v for k, v in tensors.items() if not k.startswith("embeds.")}, strict=True)
    embed = model.get_input_embeddings()
    k = SEARCH["num_beams"]
    top, bottom = int(k / 2) - 1, int(k / 2)
    trees = []
    for i, rec in enumerate(meta["records"]):
        prompt = tensors[f"embeds.{i}"]
        nodes = [{"parent": None, "depth": 0, "ids": [], "response": [], "score": 0.0, "final": False, "expanded": False}]
        active = [0]
        while active:
            new = []
            for nid in active:
                node = nodes[nid]
                with torch.no_grad():
                    x = torch.cat([prompt, embed(torch.tensor(node["response"], dtype=torch.long))])[None]
                seqs, scores = hf_group_beam(model, inputs_embeds=x, stop=TREE["period_id"], pad=meta["pad_id"],
                                             max_new_tokens=TREE["max_new_tokens"])
                node["expanded"] = True
                node["children"] = []
                for ids, sc in zip(seqs, scores):
                    child = {"parent": nid, "depth": node["depth"] + 1, "ids": ids, "response": node["response"] + ids,
                             "sentence_score": sc, "score": node["score"] + sc, "expanded": False}
                    child["final"] = meta["eos_id"] in ids or child["depth"] >= TREE["max_depth"]
                    node["children"].append(len(nodes))
                    nodes.append(child)
                    if not child["final"]:
                        new.append(len(nodes) - 1)
            new.sort(key=lambda j: nodes[j]["score"], reverse=True)
            active = new[:top] + new[len(new) - bottom:] if len(new) >= k else new
        trees.append({"id": rec["id"], "prompt_ids": rec["prompt_ids"],
                      "nodes": [{key: n[key] for key in ("parent", "ids", "sentence_score", "score", "final", "expanded")
                                 if key in n} for n in nodes]})
    doc = {"made_by": "tests/data/csr_groupbeam/make_reference.py tree-inputs + tree",
           "transformers": transformers.__version__, "search": SEARCH, "tree": TREE,
           "eos_id": meta["eos_id"], "pad_id": meta["pad_id"],
           "driven_through": "LlamaForCausalLM.generate(inputs_embeds=...) on the LLaVA's language model",
           "records": TREE_RECORDS, "trees": trees}
    out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"{len(trees)} trees, {sum(len(t['nodes']) for t in trees)} nodes -> {out}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["lms", "tree-inputs", "tree"])
    ap.add_argument("--out", type=Path, help="output file (lms, tree) or folder (tree-inputs)")
    ap.add_argument("--inputs", type=Path, help="tree: the folder tree-inputs wrote")
    a = ap.parse_args(argv)
    if a.what == "lms":
        cmd_lms(a.out or HERE / "lms.json")
    elif a.what == "tree-inputs":
        cmd_tree_inputs(a.out)
    else:
        cmd_tree(a.inputs, a.out or HERE / "tree.json")


if __name__ == "__main__":
    sys.exit(main())
