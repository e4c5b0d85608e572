"""Token-level expanders over the model's own forward + KV cache: diverse group beam search and sampling.

transformers 5 moved group ("diverse") beam search out of the core library (offline it is not
available), so it lives here. One call expands MANY contexts at once: rows are left-padded, with an
attention mask and the model's own position ids, and each row carries its prompt's full processor
output (pixels, image sizes or grids, sequence-aligned type ids: `evalsuite.models.inputs`).

Group beam search is transformers 4.37.2's (`group_beam_search` + `BeamSearchScorer`, what the released
sampler ran; tests/unit/test_csr_groupbeam_reference.py compares against it), and with one group it
returns what `model.generate(num_beams=B, num_return_sequences=B)` returns:
  * per step, groups are processed in order; group g's log-probs are lowered by
    `diversity_penalty * (how often each token was just fed by groups < g)` (Hamming diversity). A group
    feeds the tokens its new running beams end in, or the pad token once it is done;
  * each group keeps `S = B / G` running beams (the S best candidates that are not stops, also at the
    last step) and `S` finished hypotheses; the top `max(2, 1 + #stop ids) * S` continuations are
    considered, a stop among the S best finishes one with score `sum(log p) / len ** length_penalty`
    (HF `sequences_scores`, penalty deductions included);
  * a group is done when S hypotheses are finished and the best candidate of the step (stops included)
    cannot beat the worst of them (HF's `early_stopping=False` heuristic); a context stops when all its
    groups are done, or at `max_new_tokens`, where the running beams of groups not done are offered as
    hypotheses too. Hypotheses come out best first, equal scores later group first (HF's finalize).
Finished contexts are dropped from the batch (their cache rows too), so long sentences of one node do
not keep the others' rows alive.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Sequence

import torch

NEG = -1.0e9


@dataclass(frozen=True)
class Hyp:
    """One generated continuation: its token ids (the stop token included) and search score."""

    ids: tuple[int, ...]
    score: float
    group: int


@dataclass(frozen=True)
class SearchSpec:
    num_beams: int = 5
    num_groups: int = 5
    diversity_penalty: float = 3.0
    length_penalty: float = 1.0
    max_new_tokens: int = 70
    stop_ids: tuple[int, ...] = ()
    suppress_ids: tuple[int, ...] = ()
    pad_id: int = 0
    response_fill: tuple[tuple[str, int], ...] = ()  # sequence-aligned input values on response tokens


class _Batch:
    """Rows of the running batch: KV cache, attention mask and next positions, grouped by context.

    `features[i]` is context i's per-sample model input (`evalsuite.models.inputs.split_sample` of its
    prompt's processor output); `fill` gives sequence-aligned tensors' values past the prompt."""

    def __init__(self, model, contexts: Sequence[Sequence[int]], features, pad_id: int, width: int,
                 fill: dict[str, int] | None = None):
        from evalsuite.models.inputs import batch_rows, model_kwargs, sequence_keys, to_device

        device = next(model.parameters()).device
        batch = batch_rows(contexts, _as_features(features, len(contexts)), pad_id, fill, side="left")
        batch = to_device(batch, device, model.dtype)
        # Positions are the model's own (left padding counted out, M-RoPE rows for Qwen-VL), so a
        # row's logits do not depend on its padding or on the other rows.
        kw, pos = model_kwargs(model, batch, first=True)
        out = model(**{**kw, "logits_to_keep": 1})  # once: some models' own kwargs already hold it (Mllama)
        self.width, self.device = width, device
        self.cache, self.model = _cache_and_stepper(model, out)
        # Every context is prefilled once, then copied into `width` rows (beams or samples): the cache
        # (through its own reorder, which hybrid caches such as LFM2's implement for every layer type)
        # and every per-row tensor the steps read (mask, positions, sequence-aligned ids).
        self.cache.reorder_cache(torch.arange(len(contexts), device=device).repeat_interleave(width))
        self.mask = batch["attention_mask"].repeat_interleave(width, 0)
        self.next_pos = (pos[..., -1:] + 1).repeat_interleave(width, dim=-2)
        seq = sequence_keys(batch)
        self.step_extra = {k: torch.full((1, 1), (fill or {}).get(k, 0), dtype=torch.long, device=device)
                           for k in seq if batch[k].dim() == 2}
        # higher-rank token-aligned inputs (Mllama's cross-attention mask): each new token repeats its row's
        # last position, as generate extends them per step
        self.step_rows = {k: batch[k][:, -1:].repeat_interleave(width, 0) for k in seq if batch[k].dim() > 2}
        self.logits = out.logits[:, -1].float().repeat_interleave(width, 0)

    def step(self, rows: torch.Tensor, tokens: torch.Tensor) -> None:
        """Keep cache rows `rows` (reorder + drop), feed one token per row, refresh `self.logits`."""
        from evalsuite.models.inputs import model_kwargs

        rows = rows.to(self.device)
        self.cache.reorder_cache(rows)
        self.mask = torch.cat([self.mask[rows], torch.ones((len(rows), 1), dtype=torch.long, device=self.device)], 1)
        self.next_pos = self.next_pos.index_select(-2, rows)
        self.step_rows = {k: v[rows] for k, v in self.step_rows.items()}
        batch = {"input_ids": tokens.view(-1, 1).to(self.device), "attention_mask": self.mask,
                 **{k: v.expand(len(rows), 1) for k, v in self.step_extra.items()}, **self.step_rows}
        kw, _ = model_kwargs(self.model, batch, first=False, cache=self.cache, position_ids=self.next_pos)
        out = self.model(**kw)
        self.cache, _ = _cache_and_stepper(self.model, out)
        self.next_pos = self.next_pos + 1
        self.logits = out.logits[:, -1].float()


def _cache_and_stepper(model, out):
    """(KV cache of a forward's output, the module that continues from it), as `generate` continues: a model
    whose output nests its language model's (BLIP-2 / InstructBLIP: `language_model_outputs`, their generate
    hands the embedded prompt to `language_model.generate`) steps through that language model."""
    for key in ("cache", "past_key_values"):
        if key in out and out[key] is not None:
            return out[key], model
    for key, value in out.items():
        sub = getattr(model, key.removesuffix("_outputs"), None) if key.endswith("_outputs") else None
        if sub is not None and hasattr(value, "keys"):
            for name in ("cache", "past_key_values"):
                if name in value and value[name] is not None:
                    return value[name], sub
    raise RuntimeError(f"{type(model).__name__}: its forward returned no KV cache to search from")


def _as_features(features, n: int) -> list[dict]:
    """Per-context feature dicts; a bare pixel tensor (one image per context, batched) is accepted too."""
    if isinstance(features, torch.Tensor):
        return [{"pixel_values": features[i:i + 1]} for i in range(n)]
    return list(features)


def _log_probs(logits: torch.Tensor, suppress: torch.Tensor) -> torch.Tensor:
    lp = torch.log_softmax(logits, dim=-1)
    if suppress.numel():
        lp[:, suppress] = float("-inf")
    return lp


@torch.inference_mode()
def group_beam_search(model, contexts: Sequence[Sequence[int]], features, spec: SearchSpec) -> list[list[Hyp]]:
    """For each context, its `num_beams` finished hypotheses, best first (module docstring)."""
    n, G, B = len(contexts), spec.num_groups, spec.num_beams
    S = B // G
    batch = _Batch(model, contexts, features, spec.pad_id, B, dict(spec.response_fill))
    stop = torch.tensor(spec.stop_ids, dtype=torch.long)
    suppress = torch.tensor(spec.suppress_ids, dtype=torch.long)
    K = max(2, 1 + len(spec.stop_ids)) * S
    T = spec.max_new_tokens
    run_score = torch.zeros((n, G, S))
    run_score[:, :, 1:] = NEG  # every group starts from its first beam only
    run_tok = torch.zeros((n, G, S, T), dtype=torch.long)
    fin_score = torch.full((n, G, S), NEG)
    fin_tok = torch.zeros((n, G, S, T), dtype=torch.long)
    fin_len = torch.zeros((n, G, S), dtype=torch.long)
    fin_set = torch.zeros((n, G, S), dtype=torch.bool)
    fin_ord = torch.zeros((n, G, S), dtype=torch.long)  # insertion order (finalize's order among equal scores)
    open_ = torch.ones((n, G), dtype=torch.bool)  # HF: the group is not done
    alive = torch.arange(n)  # contexts whose rows are still in `batch`
    fin = (fin_score, fin_tok, fin_len, fin_set, fin_ord)
    for t in range(T):
        m = len(alive)
        lp = _log_probs(batch.logits, suppress).view(m, G, S, -1).cpu()
        V = lp.shape[-1]
        chosen = torch.zeros((m, V))  # token counts picked by earlier groups at this step
        src = torch.zeros((m, G, S), dtype=torch.long)
        tok = torch.zeros((m, G, S), dtype=torch.long)
        for g in range(G):
            scores = lp[:, g]
            if spec.diversity_penalty and g:
                scores = scores - spec.diversity_penalty * chosen[:, None, :]
            acc = (scores + run_score[alive, g, :, None]).reshape(m, S * V)
            top_s, top_i = acc.topk(K, dim=-1)
            beam, token = top_i // V, top_i % V
            is_stop = torch.isin(token, stop)
            seqs = torch.take_along_dim(run_tok[alive, g], beam[..., None], dim=1)
            seqs[:, :, t] = token
            open_g = open_[alive, g]
            # A stop among the S best candidates finishes a hypothesis (only while the group is open).
            _finish(fin, alive, g, top_s, seqs, is_stop & (torch.arange(K) < S), open_g, t + 1,
                    spec.length_penalty, t * K)
            # The running beams are the S best candidates that are not stops, in rank order (also at
            # the last step: HF's BeamSearchScorer.process picks them before the length limit applies).
            keep = torch.argsort(is_stop.to(torch.int8), dim=1, stable=True)[:, :S]
            run_score[alive, g] = torch.take_along_dim(top_s, keep, 1)
            src[:, g] = g * S + torch.take_along_dim(beam, keep, 1)
            tok[:, g] = torch.take_along_dim(token, keep, 1)
            run_tok[alive, g] = torch.take_along_dim(seqs, keep[..., None], 1)
            # A group that was done before this step feeds its pad token to later groups' penalty,
            # as HF's group beam search does (its scorer returns pads for a done group).
            fed = torch.where(open_g[:, None], tok[:, g], torch.full_like(tok[:, g], spec.pad_id))
            chosen.scatter_add_(1, fed, torch.ones((m, S)))
            # HF's early-stop heuristic (early_stopping=False): done once S hypotheses are finished and
            # the best candidate of this step (stops included) cannot beat the worst of them.
            full = fin_set[alive, g].all(-1)
            best = top_s[:, 0] / float(t + 1) ** spec.length_penalty
            open_[alive, g] = open_g & ~(full & (fin_score[alive, g].min(-1).values >= best))
        if t + 1 >= T:
            # HF's finalize at the length limit: the running beams of groups not done are hypotheses too.
            every = torch.ones((m, S), dtype=torch.bool)
            for g in range(G):
                _finish(fin, alive, g, run_score[alive, g], run_tok[alive, g], every, open_[alive, g], T,
                        spec.length_penalty, T * K)
            break
        still = open_[alive].any(-1)
        if not still.any():
            break
        rows = (torch.arange(m)[:, None] * B + src.view(m, B))[still].reshape(-1)
        batch.step(rows, tok.view(m, B)[still].reshape(-1))
        alive = alive[still]
    return [_collect(fin_score[i], fin_tok[i], fin_len[i], fin_ord[i]) for i in range(n)]


def _finish(fin, alive, g, top_s, seqs, hit, open_g, length, lp_pow, order0):
    """Merge the candidates `hit` (rank order) of group g into its S best finished hypotheses, while
    the group is open; score = sum(log p) / length ** lp_pow (HF's BeamHypotheses.add). A candidate
    equal to the worst kept one does not replace it (HF adds only a strictly better one)."""
    fin_score, fin_tok, fin_len, fin_set, fin_ord = fin
    m, K = top_s.shape
    S = fin_score.shape[-1]
    ok = hit & open_g[:, None]
    cand = torch.where(ok, top_s / float(length) ** lp_pow, torch.full_like(top_s, NEG))
    merged_s = torch.cat([fin_score[alive, g], cand], 1)
    merged_t = torch.cat([fin_tok[alive, g], seqs], 1)
    merged_l = torch.cat([fin_len[alive, g], torch.full((m, K), length, dtype=torch.long)], 1)
    merged_f = torch.cat([fin_set[alive, g], ok], 1)
    merged_o = torch.cat([fin_ord[alive, g], (order0 + torch.arange(K)).expand(m, K)], 1)
    idx = torch.sort(merged_s, dim=-1, descending=True, stable=True).indices[:, :S]
    fin_score[alive, g] = torch.take_along_dim(merged_s, idx, 1)
    fin_tok[alive, g] = torch.take_along_dim(merged_t, idx[..., None], 1)
    fin_len[alive, g] = torch.take_along_dim(merged_l, idx, 1)
    fin_set[alive, g] = torch.take_along_dim(merged_f, idx, 1)
    fin_ord[alive, g] = torch.take_along_dim(merged_o, idx, 1)


def _collect(score: torch.Tensor, toks: torch.Tensor, lens: torch.Tensor, order: torch.Tensor) -> list[Hyp]:
    G, S = score.shape
    live = [(g, s) for g in range(G) for s in range(S) if score[g, s] > NEG / 2]
    # HF's finalize sorts (group, insertion order) ascending by score and pops from the end: best
    # first, and among equal scores the later group / later insertion first.
    live.sort(key=lambda gs: (-float(score[gs]), -gs[0], -int(order[gs])))
    return [Hyp(tuple(toks[g, s, :lens[g, s]].tolist()), float(score[g, s]), g) for g, s in live]


def row_seed(seed: int, key: str) -> int:
    """A per-context seed independent of batch composition (batched == one-at-a-time draws)."""
    return zlib.crc32(f"{seed}:{key}".encode()) & 0x7FFFFFFF


@torch.inference_mode()
def sample_search(model, contexts: Sequence[Sequence[int]], features, spec: SearchSpec,
                  num_samples: int, keys: Sequence[str], seed: int = 0, temperature: float = 1.0,
                  top_p: float = 1.0) -> list[list[Hyp]]:
    """`num_samples` sampled continuations per context, each scored by its mean token log-prob.

    Each row draws from its own generator seeded by (seed, context key, sample index), so a context
    gets the same samples whatever else is in the batch."""
    n, k, T = len(contexts), num_samples, spec.max_new_tokens
    batch = _Batch(model, contexts, features, spec.pad_id, k, dict(spec.response_fill))
    stop = torch.tensor(spec.stop_ids, dtype=torch.long)
    suppress = torch.tensor(spec.suppress_ids, dtype=torch.long)
    gens = [torch.Generator().manual_seed(row_seed(seed, f"{key}#{j}")) for key in keys for j in range(k)]
    toks = torch.zeros((n * k, T), dtype=torch.long)
    lens = torch.zeros(n * k, dtype=torch.long)
    logp = torch.zeros(n * k)
    done = torch.zeros(n * k, dtype=torch.bool)
    alive = torch.arange(n * k)  # rows still in `batch`, in batch order
    for t in range(T):
        lp = _log_probs(batch.logits, suppress).cpu()
        probs = _filtered_probs(lp, temperature, top_p)
        u = torch.tensor([torch.rand(1, generator=gens[r]).item() for r in alive.tolist()])
        cdf = probs.cumsum(-1)
        token = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None]).squeeze(1).clamp(max=lp.shape[-1] - 1)
        toks[alive, t] = token
        lens[alive] = t + 1
        logp[alive] += lp.gather(1, token[:, None]).squeeze(1)
        finished = torch.isin(token, stop) | (t + 1 >= T)
        done[alive] |= finished
        keep = ~finished
        if not keep.any():
            break
        batch.step(torch.arange(len(alive))[keep], token[keep])
        alive = alive[keep]
    out = []
    for i in range(n):
        rows = range(i * k, (i + 1) * k)
        hyps = [Hyp(tuple(toks[r, :lens[r]].tolist()), float(logp[r] / lens[r]), j) for j, r in enumerate(rows)]
        out.append(sorted(hyps, key=lambda h: -h.score))
    return out


def _filtered_probs(lp: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    probs = torch.softmax(lp / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(-1, descending=True)
        # drop a token when the mass before it already reaches top_p (the first token always stays)
        drop = (sorted_p.cumsum(-1) - sorted_p) >= top_p
        sorted_p[drop] = 0.0
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return probs
