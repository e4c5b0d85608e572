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


def hf_group_beam(model, input_ids=None, inputs_embeds=None, *, stop, pad, max_new_tokens, length_penalty=1.0):
    import torch

    kw = {"input_ids": input_ids} if input_ids is not None else {"inputs_embeds": inputs_embeds}
    n = (input_ids if input_ids is not None else inputs_embeds).shape[1]
    with torch.no_grad():
        out = model.generate(**kw, attention_mask=torch.ones((1, n), dtype=torch.long), do_sample=False,
                             **SEARCH, num_return_sequences=5, eos_token_id=stop, pad_token_id=pad,
                             max_new_tokens=max_new_tokens, length_penalty=length_penalty,
                             output_scores=True, return_dict_in_generate=True)
    skip = n if input_ids is not None else 0  # with inputs_embeds, sequences hold the new ids only
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
    doc = {"made_by": "tests/data/csr_groupbeam/make_reference.py lms", "transformers": transformers.__version__,
           "torch": torch.__version__, "search": SEARCH, "models": models, "cases": cases}
    out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"{len(cases)} cases -> {out}")


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
