"""The group beam search from top-N log-probs (training/csr/vllm_beam.py, how `tree.engine: vllm` runs
`tree.expander: group_beam`), without vLLM: a fake worker answers each row with the top N of the kit LLaVA's
real log-probs. With N = `logprobs_needed` the search equals the full-vocabulary one exactly; fewer is refused.
Whole trees grow under the pool engine's continuous refill (`grow_topn`): the reference's trees, in the pool's
number of search steps, one worker call each."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from training.csr.config import TreeConfig
from training.csr.generate import TreeGenerator
from bench.tree_diff import differences
from training.csr.vllm_beam import TopNStats, dense_logprobs, logprobs_needed, search_topn


@pytest.fixture(scope="module")
def image_root(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("topn_images")
    for i in range(2):
        Image.new("RGB", (40, 48), ((37 * i + 20) % 256, (91 * i) % 256, (53 * i + 9) % 256)).save(root / f"{i}.png")
    return root


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
    prompts = [gen.rules.start({"id": f"p{i}", "image": f"{i}.png", "question": "Describe the image."}) for i in range(2)]
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
    assert VllmSampler(SimpleNamespace(worker=ok), cfg).logprobs(spec) == need and ok.max_logprobs == need
    for info, what in (({"max_logprobs": 20}, "allows 20"), ({"max_logprobs": 64, "logprobs_mode": "processed_logprobs"},
                                                           "processed_logprobs")):
        with pytest.raises(UserError, match=what) as exc:
            VllmSampler(SimpleNamespace(worker=_FakeEngine(**info)), cfg).logprobs(spec)
        assert str(exc.value).startswith("tree.engine") and "\n" not in str(exc.value)


# ------------------------------------------------------------------ whole trees: the refill driver (grow_topn)
def _bench():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import csr_generate

    return csr_generate


@pytest.fixture(scope="module")
def images16(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("topn_trees")
    for i in range(16):
        Image.new("RGB", (40, 48), ((37 * i) % 256, (91 * i) % 256, (53 * i) % 256)).save(root / f"{i}.png")
    return root


def _records(n):
    return [{"id": f"p{i}", "image": f"{i}.png", "question": "Describe the image."} for i in range(n)]


@pytest.mark.parametrize("rules", [{}, {"stop": "sentence_marks"}], ids=["released", "sentence_marks"])
def test_refill_driver_grows_the_reference_trees_in_the_pools_steps(vlm, images16, rules):
    """16 prompts, depth 4, 20 new tokens, released rules (and `stop: sentence_marks`): the refill driver's trees
    (worker: the top N of the model's own log-probs, `bench/csr_generate.TopNWorker`) are the reference engine's
    (node ids, token ids, statuses, scores within 1e-5). Its calls: one per search step of the pool's schedule
    (the same rules, every prompt resident), so exactly the pool's steps, which is at most the pool's forwards
    (each step's logits need at least one forward; the pool adds prefill forwards for joining nodes): no slack.
    The previous driver (levels in lockstep, at configs/csr.yaml's 8 / 24 as the reference ran) made one call
    per reference forward, twice as many; both ask the same requests (a node's search does not depend on its
    call-mates), the refill in fuller calls."""
    bench = _bench()
    recs = _records(16)
    ref, ref_trees = bench.run_engine(vlm, images16, recs, "reference", 20, 4, warm=False, **rules)
    pool, _ = bench.run_engine(vlm, images16, recs, "pool", 20, 4, warm=False, **rules)
    trees, st, sentences = bench.vllm_topn(vlm, images16, recs, 20, 4, bench.ALL_RESIDENT, **rules)
    old_trees, old, _ = bench.vllm_topn(vlm, images16, recs, 20, 4, bench.PRESET_BOUNDS, lockstep=True, **rules)
    print(f"refill: {st.line()}; lockstep 8/24: {old.line()}; pool: {pool['forwards']} forwards, "
          f"{pool['search_steps']} steps; reference: {ref['forwards']} forwards; {sentences} sentences")
    assert [t.id for t in trees] == [t.id for t in ref_trees] and sum(len(t.nodes) for t in trees) > 16 * 10
    assert not differences(ref_trees, trees) and not differences(ref_trees, old_trees)
    assert sentences == ref["sentences"] == pool["sentences"]
    assert st.calls == pool["search_steps"] <= pool["forwards"]
    assert old.calls == ref["forwards"] and 2 * st.calls <= old.calls
    assert st.requests == old.requests and st.requests / st.calls >= 2 * old.requests / old.calls
    assert st.max_requests <= 16 * 3 * 5  # kept nodes per level (1 best + 2 worst) x prompts x beams


def test_refill_needs_fewer_calls_than_lockstep_at_the_same_bounds(vlm, images16):
    """At the same `prompt_batch` / `batch_nodes` (4 / 12) the refill makes fewer calls than the levels in
    lockstep where nodes end at different steps (`stop: sentence_marks`): nothing waits for another prompt's
    level or tree; same trees, same requests."""
    bench = _bench()
    recs, bounds, rules = _records(16), {"prompt_batch": 4, "batch_nodes": 12}, {"stop": "sentence_marks"}
    trees, st, _ = bench.vllm_topn(vlm, images16, recs, 20, 4, bounds, **rules)
    old_trees, old, _ = bench.vllm_topn(vlm, images16, recs, 20, 4, bounds, lockstep=True, **rules)
    print(f"4 / 12, sentence_marks: refill {st.line()}; lockstep {old.line()}")
    assert not differences(old_trees, trees)
    assert st.requests == old.requests and st.calls < old.calls
    assert st.max_requests <= 12 * 5


class _Generator:
    """VllmSampler's generator: `prompt_ids` gives the project's own expanded ids, with the prompt's
    processor features standing in for the image."""

    def __init__(self, vlm, engine):
        self.vlm, self.worker = vlm, engine

    def prompt_ids(self, question, image, add_generation_prompt):
        from types import SimpleNamespace

        from training.csr.generate import encode_prompt

        ids, features = encode_prompt(self.vlm, Path(image).parent, Path(image).name, question)
        return SimpleNamespace(ids=ids, image=features)


class _TopNEngine:
    """A vLLM engine stand-in answering `next_logprobs` from the model (one forward per new prompt), recording
    what each call asked to be checked."""

    def __init__(self, vlm, spec):
        self.vlm, self.spec, self.running, self.max_logprobs = vlm, spec, False, None
        self.info = {"vocab": int(vlm.model.get_output_embeddings().weight.shape[0]), "max_logprobs": 64}
        self.calls: list[tuple[bool, list]] = []
        self.cache: dict = {}

    def start(self):
        self.running = True

    def close(self):
        self.running = False

    def next_logprobs(self, prompts, n, check=False):
        from training.csr.search import _Batch

        self.calls.append((check, [p.expanded for p in prompts]))
        out = []
        for p in prompts:
            key = tuple(p.ids)
            if key not in self.cache:
                with torch.inference_mode():
                    batch = _Batch(self.vlm.model, [p.ids], [p.image], self.spec.pad_id, 1, dict(self.spec.response_fill))
                top = torch.log_softmax(batch.logits[0], -1).topk(n)
                self.cache[key] = list(zip(top.indices.tolist(), top.values.tolist()))
            out.append(self.cache[key])
        return out


def test_sampler_grows_trees_through_one_engine_call_per_step(vlm, image_root, caplog):
    """`TreeGenerator.generate` on `tree.engine: vllm` runs `VllmSampler.grow` (2 prompts, depth 2): every step
    one `next_logprobs` call whose prompts are prompt + node response + beam tokens (the trees of `grow_topn`
    asking the same engine for exactly those ids); a node's first request carries its expanded context to be
    checked (prompt + response, as the project's processor gives it), later ones none."""
    import logging

    from evalsuite.engines.vllm_process import PromptIds
    from training.csr.rules import TreeRules
    from training.csr.vllm_beam import grow_topn
    from training.csr.vllm_expand import VllmSampler

    kw = {"max_new_tokens": 6, "max_depth": 2}
    recs = [{"id": f"p{i}", "image": f"{i}.png", "question": "Describe the image."} for i in range(2)]
    cfg = TreeConfig(engine="vllm", **kw)
    gen = TreeRules(vlm, cfg, image_root)
    engine = _TopNEngine(vlm, gen.spec)
    n, vocab = logprobs_needed(gen.spec), engine.info["vocab"]
    direct = grow_topn(gen, recs, lambda rows: engine.next_logprobs(
        [PromptIds(p.tree.prompt_ids + p.tree.nodes[nid].response_ids + list(t), p.features) for p, nid, t in rows], n),
        vocab, n)
    engine.calls.clear()
    with caplog.at_level(logging.INFO, logger="training.csr.vllm_expand"):
        with VllmSampler(_Generator(vlm, engine), cfg) as sampler:
            trees = TreeGenerator(vlm, cfg, image_root, sampler=sampler).generate(recs, progress=False)
    assert trees == direct and sum(len(t.nodes) for t in trees) > 2 * 6
    assert len(engine.calls) == sampler.beam_stats.calls > 0
    firsts = {tuple(e) for check, ex in engine.calls for e in ex if e is not None}
    roots_and_kept = {tuple(t.prompt_ids + n.response_ids) for t in trees for n in t.nodes if n.children}
    assert firsts == roots_and_kept
    assert all(check == any(e is not None for e in ex) for check, ex in engine.calls)
    assert "tree.engine vllm, group_beam: " in caplog.text
    with pytest.raises(RuntimeError, match="grow"):
        sampler.expand([], TreeRules(vlm, cfg, image_root).spec, [])


def test_refill_driver_is_bounded_by_the_workers_kv_capacity_and_keeps_the_trees(vlm, images16):
    """A worker that reports its KV capacity (`kv_tokens`) bounds what searches at once: a node holds its
    context once (the prefix cache) and its 5 beams' tokens. With room for about two nodes the calls carry at
    most two nodes' rows and there are more of them; the trees are the unbounded run's."""
    from training.csr.rules import Stats, TreeRules
    from training.csr.vllm_beam import grow_topn

    bench = _bench()
    cfg = TreeConfig(engine="vllm", max_new_tokens=6, max_depth=2)
    rules = TreeRules(vlm, cfg, images16)
    vocab = vlm.model.get_output_embeddings().weight.shape[0]
    n = min(logprobs_needed(rules.spec), vocab)
    recs = _records(4)
    free, free_stats = TopNStats(), Stats()
    trees = grow_topn(rules, recs, bench.TopNWorker(rules, n), vocab, n, free, tree_stats=free_stats)
    node = len(trees[0].prompt_ids) + 5 * 6  # a root's context + its beams' tokens
    bound = TopNStats()
    small = grow_topn(rules, recs, bench.TopNWorker(rules, n), vocab, n, bound, kv_tokens=2 * node + 10)
    assert not differences(trees, small) and free_stats.sentences > 4 * 5
    assert bound.calls > free.calls and bound.max_requests <= 2 * 5 < free.max_requests
