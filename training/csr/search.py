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

from dataclasses import dataclass
from typing import Sequence

import torch

from evalsuite.engines.seeds import stable_seed
from evalsuite.gen_settings import GroupBeamSettings

NEG = -1.0e9


@dataclass(frozen=True)
class Hyp:
    """One generated continuation: its token ids (the stop token included) and search score."""

    ids: tuple[int, ...]
    score: float
    group: int


@dataclass(frozen=True)
class SearchSpec(GroupBeamSettings):
    """The search of one node: the generation settings (evalsuite/gen_settings.py; training/csr/rules.py takes
    them from the tree config) and the token ids the tree rules resolved."""

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


def _log_probs(logits: torch.Tensor, suppress: torch.Tensor, normalized: bool = False) -> torch.Tensor:
    """Token log-probs with the suppressed ids at -inf. normalized=True: `logits` already are log-probs
    (a driver that hands over top-N log-probs, -inf outside them); they are copied, not renormalised."""
    lp = logits.to(torch.float32, copy=True) if normalized else torch.log_softmax(logits, dim=-1)
    if suppress.numel():
        lp[:, suppress] = float("-inf")
    return lp


class GroupBeams:
    """The group beam search state of many nodes (one context each) and its step, shared by both engines:
    `group_beam_search` (every node at the same step) and `pool.Search` (each node at its own step, nodes
    joining and leaving between steps). Node i owns score rows i*B .. i*B+B-1; `keys` says who each node
    is (the caller's handle). Per node: `t` (its step counter), per group its S running beams
    (`run_score`, `run_tok`), its S best finished hypotheses (`fin_*`) and whether it is open (not done)."""

    FIELDS = ("t", "run_score", "run_tok", "fin_score", "fin_tok", "fin_len", "fin_set", "fin_ord", "open_")

    def __init__(self, spec: SearchSpec, device):
        self.spec, self.device = spec, device   # its ranges checked when it was built (gen_settings.py)
        G, B = spec.num_beam_groups, spec.num_beams
        self.G, self.B, self.S = G, B, B // G
        self.T = spec.max_new_tokens
        self.K = max(2, 1 + len(spec.stop_ids)) * self.S
        self.stop = torch.tensor(spec.stop_ids, dtype=torch.long, device=device)
        self.suppress = torch.tensor(spec.suppress_ids, dtype=torch.long, device=device)
        self.keys: list = []
        z = lambda *shape, **kw: torch.zeros(shape, device=device, **kw)  # noqa: E731
        G, S, T = self.G, self.S, self.T
        self.t = z(0, dtype=torch.long)
        self.run_score, self.run_tok = z(0, G, S), z(0, G, S, T, dtype=torch.long)
        self.fin_score, self.fin_tok = z(0, G, S), z(0, G, S, T, dtype=torch.long)
        self.fin_len, self.fin_set = z(0, G, S, dtype=torch.long), z(0, G, S, dtype=torch.bool)
        self.fin_ord = z(0, G, S, dtype=torch.long)  # insertion order (finalize's order among equal scores)
        self.open_ = z(0, G, dtype=torch.bool)  # HF: the group is not done

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, keys: list) -> None:
        """New nodes at step 0, after the present ones."""
        m, G, S, T, d = len(keys), self.G, self.S, self.T, self.device
        run = torch.zeros((m, G, S), device=d)
        run[:, :, 1:] = NEG  # every group starts from its first beam only
        self.keys += keys
        self.t = torch.cat([self.t, torch.zeros(m, dtype=torch.long, device=d)])
        self.run_score = torch.cat([self.run_score, run])
        self.run_tok = torch.cat([self.run_tok, torch.zeros((m, G, S, T), dtype=torch.long, device=d)])
        self.fin_score = torch.cat([self.fin_score, torch.full((m, G, S), NEG, device=d)])
        self.fin_tok = torch.cat([self.fin_tok, torch.zeros((m, G, S, T), dtype=torch.long, device=d)])
        self.fin_len = torch.cat([self.fin_len, torch.zeros((m, G, S), dtype=torch.long, device=d)])
        self.fin_set = torch.cat([self.fin_set, torch.zeros((m, G, S), dtype=torch.bool, device=d)])
        self.fin_ord = torch.cat([self.fin_ord, torch.zeros((m, G, S), dtype=torch.long, device=d)])
        self.open_ = torch.cat([self.open_, torch.ones((m, G), dtype=torch.bool, device=d)])

    def _keep(self, idx: torch.Tensor) -> None:
        for name in self.FIELDS:
            setattr(self, name, getattr(self, name).index_select(0, idx))

    def advance(self, scores: torch.Tensor, normalized: bool = False, host=torch.Tensor.cpu):
        """One step of every node from its rows' next-token `scores` ([len * B, V]: logits, or log-probs
        with normalized=True). Returns (ended: [(key, hypotheses best first)] of the nodes whose search
        ended, rows: the score rows the nodes that go on continue from (their new beams, in order),
        tokens: the token each of those rows feeds). Ended nodes leave the state. `host` moves a tensor
        to the host (the pool counts the bytes); what it reads: one flag, one flag per node, and the
        finished hypotheses of ended nodes."""
        spec, G, S, B, K, T = self.spec, self.G, self.S, self.B, self.K, self.T
        m = len(self)
        lp = _log_probs(scores, self.suppress, normalized).to(self.device)
        V = lp.shape[-1]
        lp = lp.view(m, G, S, V)
        t = self.t
        last = t + 1 >= T
        length = (t + 1).double()
        ar = torch.arange(m, device=self.device)
        chosen = torch.zeros((m, V), device=self.device)  # token counts picked by earlier groups at this step
        src = torch.zeros((m, G, S), dtype=torch.long, device=self.device)
        tok = torch.zeros((m, G, S), dtype=torch.long, device=self.device)
        order0 = t * K
        for g in range(G):
            cand = lp[:, g]
            if spec.diversity_penalty and g:
                cand = cand - spec.diversity_penalty * chosen[:, None, :]
            acc = (cand + self.run_score[:, g, :, None]).reshape(m, S * V)
            top_s, top_i = acc.topk(K, dim=-1)
            beam, token = top_i // V, top_i % V
            is_stop = torch.isin(token, self.stop)
            seqs = torch.take_along_dim(self.run_tok[:, g], beam[..., None], dim=1)
            seqs[ar, :, t] = token
            open_g = self.open_[:, g].clone()
            # A stop among the S best candidates finishes a hypothesis (only while the group is open).
            self._finish(g, top_s, seqs, is_stop & (torch.arange(K, device=self.device) < S), open_g,
                         length, order0)
            # The running beams are the S best candidates that are not stops, in rank order (also at
            # the last step: HF's BeamSearchScorer.process picks them before the length limit applies).
            keep = torch.argsort(is_stop.to(torch.int8), dim=1, stable=True)[:, :S]
            self.run_score[:, g] = torch.take_along_dim(top_s, keep, 1)
            src[:, g] = g * S + torch.take_along_dim(beam, keep, 1)
            tok[:, g] = torch.take_along_dim(token, keep, 1)
            self.run_tok[:, g] = torch.take_along_dim(seqs, keep[..., None], 1)
            # A group that was done before this step feeds its pad token to later groups' penalty,
            # as HF's group beam search does (its scorer returns pads for a done group).
            fed = torch.where(open_g[:, None], tok[:, g], torch.full_like(tok[:, g], spec.pad_id))
            chosen.scatter_add_(1, fed, torch.ones((m, S), device=self.device))
            # HF's early-stop heuristic (early_stopping=False): done once S hypotheses are finished and
            # the best candidate of this step (stops included) cannot beat the worst of them.
            full = self.fin_set[:, g].all(-1)
            best = top_s[:, 0] / (length ** spec.length_penalty).float()
            self.open_[:, g] = open_g & ~(full & (self.fin_score[:, g].min(-1).values >= best))
        if bool(host(last.any())):
            # HF's finalize at the length limit: the running beams of groups not done are hypotheses
            # too (nodes at the limit only).
            every = last[:, None].expand(m, S)
            for g in range(G):
                self._finish(g, self.run_score[:, g], self.run_tok[:, g], every, self.open_[:, g].clone(),
                             length, torch.full_like(t, T * K))
        still = self.open_.any(-1) & ~last
        self.t = t + 1
        still_h = host(still)
        ended = []
        if not bool(still_h.all()):
            done = (~still).nonzero().squeeze(1)
            sc, ln = host(self.fin_score[done]), host(self.fin_len[done])
            tk, od = host(self.fin_tok[done]), host(self.fin_ord[done])
            for j, i in enumerate((~still_h).nonzero().squeeze(1).tolist()):
                ended.append((self.keys[i], _collect(sc[j], tk[j], ln[j], od[j])))
        keep_nodes = still.nonzero().squeeze(1)
        rows = (keep_nodes[:, None] * B + src[keep_nodes].view(-1, B)).reshape(-1)
        toks = tok[keep_nodes].reshape(-1)
        if ended:
            self._keep(keep_nodes)
            self.keys = [k for k, s in zip(self.keys, still_h.tolist()) if s]
        return ended, rows, toks

    def _finish(self, g, top_s, seqs, hit, open_g, length, order0) -> None:
        """Merge the candidates `hit` (rank order) of group g into its S best finished hypotheses, while
        the group is open; score = sum(log p) / length ** length_penalty (HF's BeamHypotheses.add), with
        each node's own length and insertion order. A candidate equal to the worst kept one does not
        replace it (HF adds only a strictly better one)."""
        S = self.S
        m, K = top_s.shape
        ok = hit & open_g[:, None]
        denom = (length ** self.spec.length_penalty).float()
        cand = torch.where(ok, top_s / denom[:, None], torch.full_like(top_s, NEG))
        merged_s = torch.cat([self.fin_score[:, g], cand], 1)
        merged_t = torch.cat([self.fin_tok[:, g], seqs], 1)
        merged_l = torch.cat([self.fin_len[:, g], length.long()[:, None].expand(m, K)], 1)
        merged_f = torch.cat([self.fin_set[:, g], ok], 1)
        merged_o = torch.cat([self.fin_ord[:, g], order0[:, None] + torch.arange(K, device=self.device)], 1)
        idx = torch.sort(merged_s, dim=-1, descending=True, stable=True).indices[:, :S]
        self.fin_score[:, g] = torch.take_along_dim(merged_s, idx, 1)
        self.fin_tok[:, g] = torch.take_along_dim(merged_t, idx[..., None], 1)
        self.fin_len[:, g] = torch.take_along_dim(merged_l, idx, 1)
        self.fin_set[:, g] = torch.take_along_dim(merged_f, idx, 1)
        self.fin_ord[:, g] = torch.take_along_dim(merged_o, idx, 1)


@torch.inference_mode()
def group_beam_search(model, contexts: Sequence[Sequence[int]], features, spec: SearchSpec) -> list[list[Hyp]]:
    """For each context, its `num_beams` finished hypotheses, best first (module docstring). Every
    context steps together (`GroupBeams`, on the host)."""
    beams = GroupBeams(spec, torch.device("cpu"))
    batch = _Batch(model, contexts, features, spec.pad_id, spec.num_beams, dict(spec.response_fill))
    beams.add(list(range(len(contexts))))
    out: list[list[Hyp]] = [[] for _ in contexts]
    while len(beams):
        ended, rows, tokens = beams.advance(batch.logits)
        for i, hyps in ended:
            out[i] = hyps
        if len(beams):
            batch.step(rows, tokens)
    return out


def _collect(score: torch.Tensor, toks: torch.Tensor, lens: torch.Tensor, order: torch.Tensor) -> list[Hyp]:
    G, S = score.shape
    live = [(g, s) for g in range(G) for s in range(S) if score[g, s] > NEG / 2]
    # HF's finalize sorts (group, insertion order) ascending by score and pops from the end: best
    # first, and among equal scores the later group / later insertion first.
    live.sort(key=lambda gs: (-float(score[gs]), -gs[0], -int(order[gs])))
    return [Hyp(tuple(toks[g, s, :lens[g, s]].tolist()), float(score[g, s]), g) for g, s in live]


@torch.inference_mode()
def sample_search(model, contexts: Sequence[Sequence[int]], features, spec: SearchSpec,
                  num_samples: int, keys: Sequence[str], seed: int = 0) -> list[list[Hyp]]:
    """`num_samples` sampled continuations per context, each scored by its mean token log-prob.

    Each row draws from its own generator seeded by (seed, context key, sample index), so a context
    gets the same samples whatever else is in the batch."""
    n, k, T = len(contexts), num_samples, spec.max_new_tokens
    batch = _Batch(model, contexts, features, spec.pad_id, k, dict(spec.response_fill))
    stop = torch.tensor(spec.stop_ids, dtype=torch.long)
    suppress = torch.tensor(spec.suppress_ids, dtype=torch.long)
    gens = [torch.Generator().manual_seed(stable_seed(seed, f"{key}#{j}")) for key in keys for j in range(k)]
    toks = torch.zeros((n * k, T), dtype=torch.long)
    lens = torch.zeros(n * k, dtype=torch.long)
    logp = torch.zeros(n * k)
    done = torch.zeros(n * k, dtype=torch.bool)
    alive = torch.arange(n * k)  # rows still in `batch`, in batch order
    for t in range(T):
        lp = _log_probs(batch.logits, suppress).cpu()
        probs = _filtered_probs(lp, spec.temperature, spec.top_p)
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
