"""The group beam search from top-N log-probs (training/csr/vllm_beam.py, how `tree.engine: vllm` runs
`tree.expander: group_beam`), without vLLM: a fake worker answers each row with the top N of the kit LLaVA's
real log-probs. With N = `logprobs_needed` the search equals the full-vocabulary one exactly; fewer is refused."""
from __future__ import annotations

import pytest
import torch

from training.csr.config import TreeConfig
from training.csr.generate import TreeGenerator
from training.csr.vllm_beam import TopNStats, dense_logprobs, logprobs_needed, search_topn


@pytest.fixture(scope="module")
def image_root(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("topn_images")
    for i in range(2):
        Image.new("RGB", (40, 48), ((37 * i + 20) % 256, (91 * i) % 256, (53 * i + 9) % 256)).save(root / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def vlm(tiny_vlm_dir):
    from evalsuite.models.vlm import load_vlm

    return load_vlm(str(tiny_vlm_dir), device="cpu")


class FakeWorker:
    """Answers a row (node, beam tokens) with the top N of the model's log-softmax at its next position: one
    forward of the whole row, as a vLLM request computes it. Each row's full log-probs are computed once and
    kept, so searches asking the same row see the same numbers."""

    def __init__(self, vlm, contexts, spec):
        self.vlm, self.contexts, self.spec = vlm, contexts, spec
        self.full: dict = {}
        self.n: int | None = None  # None: the whole vocabulary

    def logprobs(self, row) -> torch.Tensor:
        from training.csr.search import _Batch

        if row not in self.full:
            ids, features = self.contexts[row[0]]
            with torch.inference_mode():
                batch = _Batch(self.vlm.model, [ids + list(row[1])], [features], self.spec.pad_id, 1,
                               dict(self.spec.response_fill))
            self.full[row] = torch.log_softmax(batch.logits[0], -1)
        return self.full[row]

    def __call__(self, rows):
        out = []
        for row in rows:
            lp = self.logprobs(row)
            top = lp.topk(self.n or lp.numel())
            out.append(list(zip(top.indices.tolist(), top.values.tolist())))
        return out


def _setup(vlm, image_root, stop):
    gen = TreeGenerator(vlm, TreeConfig(stop=stop, max_new_tokens=8), image_root)
    prompts = [gen._start({"id": f"p{i}", "image": f"{i}.png", "question": "Describe the image."}) for i in range(2)]
    tail = vlm.tokenizer("A small red", add_special_tokens=False)["input_ids"]
    # two roots and two nodes deeper in a response
    contexts = [(p.tree.prompt_ids + extra, p.features) for extra in ([], tail) for p in prompts]
    return gen.spec, contexts


def test_dense_logprobs_places_the_top_n():
    d = dense_logprobs([[(3, -0.5), (1, -1.25)], [], [(0, -2.0)]], 5)
    inf = float("-inf")
    assert d.dtype == torch.float32 and d.tolist() == [[inf, -1.25, inf, -0.5, inf], [inf] * 5, [-2.0, inf, inf, inf, inf]]


@pytest.mark.parametrize("stop", ["released", "sentence_marks"])
def test_topn_search_equals_the_full_vocabulary_search(vlm, image_root, stop):
    """N = K + (G-1) S + |suppress| (K = pool.Search.K): the same hypotheses (ids, scores, groups) as the
    search over every token; the diversity penalty did push later groups past the K best raw tokens (so
    the bound is exercised), and N - 1 is refused."""
    from training.csr.pool import Search, Stats

    spec, contexts = _setup(vlm, image_root, stop)
    search = Search(spec, torch.device("cpu"), Stats())
    n = logprobs_needed(spec)
    assert n == search.K + (search.G - 1) * search.S + len(set(spec.suppress_ids))
    worker = FakeWorker(vlm, contexts, spec)
    vocab = int(worker.logprobs((0, ())).numel())
    assert n < vocab
    full = search_topn(len(contexts), worker, spec, vocab, vocab)
    worker.n = n
    stats = TopNStats()
    top = search_topn(len(contexts), worker, spec, vocab, n, stats)
    assert top == full
    assert all(len(h) == spec.num_beams for h in top)
    # the raw ranks of the groups' first tokens at the roots: the penalty spread the groups over the top G
    # tokens; with the released stop (K = 2) that is beyond the K best raw tokens, so the bound is exercised
    ranks = [int((worker.logprobs((i, ())) > worker.logprobs((i, ()))[h.ids[0]]).sum()) for i in range(2) for h in top[i]]
    assert max(ranks) >= (search.K if stop == "released" else search.G - 1), ranks
    # every step one call; a node's first step sends one request for its B identical rows
    assert stats.calls >= 1 and stats.requests < stats.beam_rows and stats.max_requests <= len(contexts) * spec.num_beams
    with pytest.raises(ValueError, match="needs"):
        search_topn(len(contexts), worker, spec, vocab, n - 1)


def test_topn_search_equals_hf_group_beam_search(vlm, image_root):
    """The same search against `search.group_beam_search` (HF's KV-cached forward; transformers 4.37.2's
    rules): the same sentences, scores within float rounding."""
    from training.csr.search import group_beam_search

    spec, contexts = _setup(vlm, image_root, "released")
    worker = FakeWorker(vlm, contexts, spec)
    worker.n = logprobs_needed(spec)
    vocab = int(worker.logprobs((0, ())).numel())
    top = search_topn(len(contexts), worker, spec, vocab, worker.n)
    ref = group_beam_search(vlm.model, [c for c, _ in contexts], [f for _, f in contexts], spec)
    assert [[h.ids for h in hs] for hs in top] == [[h.ids for h in hs] for hs in ref]
    for hs, rs in zip(top, ref):
        assert [h.score for h in hs] == pytest.approx([r.score for r in rs], abs=1e-5)


class _FakeEngine:
    def __init__(self, **info):
        self.info, self.running, self.max_logprobs = {"vocab": 226, **info}, False, None

    def start(self):
        self.running = True


def test_worker_limits_refused_in_one_line():
    """`tree.engine: vllm` + `group_beam` is accepted; the worker is started with max_logprobs >= N, and one
    that reports fewer, or log-probs other than raw ones, is a UserError naming tree.engine."""
    from types import SimpleNamespace

    from evalsuite.errors import UserError
    from training.csr.search import SearchSpec
    from training.csr.vllm_expand import VllmSampler

    cfg = TreeConfig(engine="vllm")
    assert (cfg.engine, cfg.expander) == ("vllm", "group_beam")
    spec = SearchSpec(stop_ids=tuple(range(30)), suppress_ids=(40, 41))
    need = logprobs_needed(spec)
    assert need == 31 + 4 + 2  # K = (1 + 30 stop ids) x 1, 4 earlier groups, 2 suppressed
    ok = _FakeEngine(max_logprobs=need)
    assert VllmSampler(SimpleNamespace(engine=ok), cfg).logprobs(spec) == need and ok.max_logprobs == need
    for info, what in (({"max_logprobs": 20}, "allows 20"), ({"max_logprobs": 64, "logprobs_mode": "processed_logprobs"},
                                                           "processed_logprobs")):
        with pytest.raises(UserError, match=what) as exc:
            VllmSampler(SimpleNamespace(engine=_FakeEngine(**info)), cfg).logprobs(spec)
        assert str(exc.value).startswith("tree.engine") and "\n" not in str(exc.value)
