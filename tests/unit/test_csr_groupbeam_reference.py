"""The CSR diverse group beam search (training/csr/search.py) against transformers 4.37.2's own
`generate(num_beams=5, num_beam_groups=5, diversity_penalty=3.0, num_return_sequences=5, eos_token_id=stop)`,
the search the released sampler ran (inference_csr/sample.py). The expected ids and `sequences_scores`
were produced by running 4.37.2 (tests/data/csr_groupbeam/make_reference.py, which also builds the tiny
random Llamas from seeds, identically under transformers 5: the recorded probe logits check that first)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "csr_groupbeam"


def _maker():
    name = "csr_groupbeam_make_reference"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, DATA / "make_reference.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def _search_spec(m: dict, search: dict | None = None):
    from training.csr.search import SearchSpec

    search = search or {"num_beams": 5, "num_beam_groups": 5, "diversity_penalty": 3.0}
    # generate() with pad_token_id None pads (and feeds the Hamming penalty) with the first eos id
    pad = m["pad"] if m["pad"] is not None else m["stop"]
    return SearchSpec(num_beams=search["num_beams"], num_beam_groups=search["num_beam_groups"],
                      diversity_penalty=search["diversity_penalty"], length_penalty=m["length_penalty"],
                      max_new_tokens=m["max_new_tokens"], stop_ids=(m["stop"],), pad_id=pad)


def _differing(model, m, cases, search=None):
    from training.csr.search import group_beam_search

    outs = group_beam_search(model, [c["prompt"] for c in cases], [{} for _ in cases], _search_spec(m, search))
    return [c for c, o in zip(cases, outs)
            if [list(h.ids) for h in o] != c["ids"] or any(abs(h.score - s) > 1e-4 for h, s in zip(o, c["scores"]))]


@pytest.fixture(scope="module")
def reference():
    return json.loads((DATA / "lms.json").read_text())


def test_reference_data_is_broad(reference):
    """>= 300 prompt x model cases from 4.37.2, groups finishing at many different steps and at the limit."""
    assert reference["transformers"] == "4.37.2" and sum("search" not in c for c in reference["cases"]) >= 300
    ends = {len(ids) for c in reference["cases"] for ids in c["ids"]
            if reference["models"][c["model"]]["stop"] in ids}
    assert len(ends) >= 15
    assert any(reference["models"][c["model"]]["stop"] not in ids for c in reference["cases"] for ids in c["ids"])


@pytest.mark.parametrize("mi", range(5))
def test_group_beam_search_equals_transformers_4_37_2(reference, mi):
    """All prompts of one model in one batched call (and a few one per call): every case's 5 candidates
    equal HF's, in HF's order, scores within 1e-4."""
    mk = _maker()
    m = reference["models"][mi]
    model = mk.build_lm(m)
    assert mk.probe(model, m) == pytest.approx(m["probe_logits"], abs=1e-5), "tiny Llama weights differ from 4.37.2's"
    cases = [c for c in reference["cases"] if c["model"] == mi and "search" not in c]
    assert len(cases) == 64
    bad = _differing(model, m, cases)
    assert not bad, f"{len(bad)} of {len(cases)} cases differ from transformers 4.37.2, first: {bad[0]}"
    alone = [c for c in cases[:6] if _differing(model, m, [c])]  # one context per call, no left padding
    assert not alone, alone[0]


def test_other_beam_layouts_equal_transformers_4_37_2(reference):
    """One group of 5 beams (4.37.2's beam_search) and 5 groups of 2 beams: the same scorer with S > 1
    (its finished-hypothesis heap, done test and output order)."""
    mk = _maker()
    other = [c for c in reference["cases"] if "search" in c]
    assert len(other) >= 96
    layouts = {(c["model"], json.dumps(c["search"], sort_keys=True)) for c in other}
    for mi, key in sorted(layouts):
        m = reference["models"][mi]
        cases = [c for c in other if c["model"] == mi and json.dumps(c["search"], sort_keys=True) == key]
        bad = _differing(mk.build_lm(m), m, cases, cases[0]["search"])
        assert not bad, f"model {mi}, {key}: {len(bad)} of {len(cases)} differ, first: {bad[0]}"


def _by_path(nodes, children, fields):
    """{path of child positions from the root: fields(node)}: compares trees whatever their node numbering."""
    out, todo = {}, [((), 0)]
    while todo:
        path, i = todo.pop()
        out[path] = fields(nodes[i])
        todo.extend((path + (j,), c) for j, c in enumerate(children(i)))
    return out


def test_csr_tree_equals_transformers_4_37_2_driven_node_by_node(tiny_vlm_dir, tmp_path):
    """The kit's tiny LLaVA, released tree rules (one stop token: a frequent token stands in for ".", which
    the random model hardly says; EOS final, 5 children kept, 1 best + 2 worst per depth, nothing
    suppressed; a depth cap of 4 instead of 1024 characters): every node's sentence,
    beam score, cumulative score, finality and expansion equal those of the tree grown by calling 4.37.2's
    group beam search once per node (tree.json; its language model driven with the LLaVA's input embeddings)."""
    from evalsuite.models.vlm import load_vlm
    from training.csr.config import TreeConfig
    from training.csr.generate import TreeGenerator

    mk = _maker()
    ref = json.loads((DATA / "tree.json").read_text())
    vlm = load_vlm(tiny_vlm_dir, device="cpu")
    t = ref["tree"]
    gen = TreeGenerator(vlm, TreeConfig(max_new_tokens=t["max_new_tokens"], max_depth=t["max_depth"], max_chars=None,
                                        period_id=t["period_id"]), mk.make_images(tmp_path / "images"))
    # released: only the image placeholder is banned (it cannot be fed back; the released LLaVA has no
    # such token), and the 4.37.2 trees never pick it, so their candidates are unaffected
    image_id = vlm.model.config.image_token_id
    assert gen.spec.stop_ids == (t["period_id"],) and gen.spec.pad_id == ref["pad_id"] and gen.spec.suppress_ids == (image_id,)
    assert not any(image_id in n["ids"] for w in ref["trees"] for n in w["nodes"])
    trees = gen.generate(ref["records"], progress=False)
    for tree, want in zip(trees, ref["trees"]):
        assert tree.prompt_ids == want["prompt_ids"], "the kit's tiny LLaVA or its prompt changed: rerun make_reference.py"
        ours = _by_path(tree.nodes, lambda i, nodes=tree.nodes: nodes[i].children,
                        lambda n: (n.sentence_ids, n.sentence_score, n.lm_score, n.is_final, bool(n.children)))
        kids = {}
        for i, n in enumerate(want["nodes"]):
            if n["parent"] is not None:
                kids.setdefault(n["parent"], []).append(i)
        theirs = _by_path(want["nodes"], lambda i, kids=kids: kids.get(i, []),
                          lambda n: (n["ids"], n.get("sentence_score", 0.0), n["score"], n["final"], n["expanded"]))
        assert sorted(ours) == sorted(theirs), tree.id
        for path, (ids, s, lm, final, expanded) in theirs.items():
            o = ours[path]
            assert (o[0], o[3], o[4]) == (ids, final, expanded), (tree.id, path)
            assert o[1] == pytest.approx(s, abs=1e-4) and o[2] == pytest.approx(lm, abs=1e-4), (tree.id, path)
