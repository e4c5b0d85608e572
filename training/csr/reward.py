"""Sentence rewards of a search tree and their aggregation over complete responses (docs/csr-method.md §3).

Per scorable node (a usable, non-empty sentence):
  * `lm`  language self-reward, by `RewardConfig.language_score`: `beam` (released) is the search's
          own score kept on the node (`Node.sentence_score`: HF's `sequences_scores`, the mean token
          log-prob including the diversity-penalty deductions), so no model pass is needed;
          `teacher_forced` is the mean token log-prob of the same ids from one penalty-free pass.
  * `clip` visual reward R_I = max(s * cos, 0) of (image, sentence) from the shared
          `evalsuite.metrics.relevance.RelevanceScorer` (s = exp(logit_scale), ~100); `cos` is kept.
          The text it scores follows `RewardConfig.clip_text`: `released` cuts the node's decoded text
          (prompt included) at len(parent's text) + 3 characters and keeps only whitelisted characters
          (`clean.released_new_text`, the released score.py's extraction); `sentence` is the decoded sentence.

Aggregation (`path_rewards`), lambda = `RewardConfig.lam`:
  * `rank` (default, the released code): among the n scorable children of one parent,
        rank_lm = (position by descending lm + 1) / n,  rank_clip likewise by descending cosine
        (the unclipped logit order, as released), cost = (1 - lam) rank_lm + lam rank_clip;
    path score = sum(cost) / (#sentences + 1) (lower is better). Its `reward` is 1 - score.
  * `value` (the paper): R(s) = lam R_I(s) + (1 - lam) R_T(s) with R_T = 100 exp(lm), the geometric
    mean token probability on CLIP's 0-100 scale; path reward = sum of R(s) (higher is better).
A node with status "end" (a bare EOS) closes its path and contributes no sentence.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from training.csr.clean import released_new_texts
from training.csr.config import RewardConfig
from training.csr.generate import Tree

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- what CLIP reads (clip_text: released)
def clip_texts(vlm, tree: Tree, nids: Sequence[int], mode: str) -> list[str]:
    """The text CLIP scores for each node id (RewardConfig.clip_text)."""
    if mode == "sentence":
        return [tree.nodes[n].text for n in nids]
    # the released score.py's extract_new_text: the node's text past its parent's, whitelisted
    return released_new_texts(vlm, tree, nids)


# ---------------------------------------------------------------- pure aggregation (hand-checkable)
def sibling_ranks(values: Sequence[float]) -> list[float]:
    """(position in descending order + 1) / n for each value; ties keep input order."""
    n = len(values)
    order = sorted(range(n), key=lambda i: (-values[i], i))
    ranks = [0.0] * n
    for pos, i in enumerate(order):
        ranks[i] = (pos + 1) / n
    return ranks


def rank_path_score(costs: Sequence[float]) -> float:
    """The released code's length-normalised cost: sum / (#sentences + 1)."""
    return sum(costs) / (len(costs) + 1)


def value_sentence_reward(clip: float, lm: float, lam: float) -> float:
    return lam * clip + (1.0 - lam) * 100.0 * math.exp(lm)


def scorable(tree: Tree) -> list[int]:
    return [n.id for n in tree.nodes if n.parent is not None and n.usable and n.status != "end" and n.text]


@dataclass
class PathReward:
    path: list[int]          # node ids root -> final
    sentences: list[int]     # the scorable node ids on it
    score: float             # rank: mean cost (lower better); value: summed reward (higher better)
    reward: float            # higher is better in both modes
    response_ids: list[int]
    key: float | None = None  # select_pair's sort key with pairs.tie_order released, lower first (rank: score)


def node_costs(tree: Tree, lm: dict[int, float], cos: dict[int, float], lam: float) -> dict[int, float]:
    """cost = (1 - lam) rank_lm + lam rank_clip over each parent's scorable children."""
    ok = set(scorable(tree))
    costs: dict[int, float] = {}
    for node in tree.nodes:
        kids = [c for c in node.children if c in ok]
        if not kids:
            continue
        r_lm = sibling_ranks([lm[c] for c in kids])
        r_clip = sibling_ranks([cos[c] for c in kids])
        for c, a, b in zip(kids, r_lm, r_clip):
            costs[c] = (1.0 - lam) * a + lam * b
    return costs


def path_rewards(tree: Tree, scores: dict[int, dict], cfg: RewardConfig, distinct: bool = True,
                 order: str = "released") -> list[PathReward]:
    """Every complete path of `tree` with its aggregated score, in `order` (`Tree.complete_paths`,
    `pairs.tie_order`): one entry per distinct response (the first path giving it), or with
    `distinct=False` every path, as the released construct.py ranks them."""
    ok = set(scorable(tree))
    if cfg.mode == "rank":
        costs = node_costs(tree, {k: v["lm"] for k, v in scores.items()},
                           {k: v["cos"] for k, v in scores.items()}, cfg.lam)
    out: list[PathReward] = []
    seen: set[tuple[int, ...]] = set()
    for path in tree.complete_paths(order):
        sents = [nid for nid in path if nid in ok]
        if not sents:
            continue  # a response with no usable sentence (a bare EOS at the root) has nothing to judge
        response = tree.nodes[path[-1]].response_ids
        if distinct and tuple(response) in seen:
            continue
        seen.add(tuple(response))
        if cfg.mode == "rank":
            score = rank_path_score([costs[s] for s in sents])
            reward = 1.0 - score
        else:
            score = sum(value_sentence_reward(scores[s]["clip"], scores[s]["lm"], cfg.lam) for s in sents)
            reward = score
        # rank: construct.py sorts by the mean cost itself (1 - cost can round two costs to one reward)
        key = score if cfg.mode == "rank" else -reward
        out.append(PathReward(path=path, sentences=sents, score=score, reward=reward, response_ids=response, key=key))
    return out


# ---------------------------------------------------------------- model passes
def language_scores(vlm, trees: Sequence[Tree], features: Sequence | None = None, batch: int = 32,
                    image_root: str | Path | None = None) -> list[dict[int, float]]:
    """Teacher-forced mean token log-prob of every scorable sentence, batched across trees.

    `features[t]`: tree t's per-sample model inputs (`training.csr.generate.encode_prompt`; a bare
    pixel tensor is accepted for one-image-tensor models); None = encode each tree's prompt again from
    its image under `image_root`."""
    import torch

    from evalsuite.models.inputs import batch_rows, model_kwargs, to_device
    from training.csr.generate import response_fill

    items = [(ti, nid) for ti, t in enumerate(trees) for nid in scorable(t)]
    out: list[dict[int, float]] = [{} for _ in trees]
    model = vlm.model
    device = next(model.parameters()).device
    pad = vlm.tokenizer.pad_token_id if vlm.tokenizer.pad_token_id is not None else vlm.tokenizer.eos_token_id
    if features is None:
        features = _prompt_features(vlm, trees, image_root)
    feats = [{"pixel_values": f} if isinstance(f, torch.Tensor) else f for f in features]
    for lo in range(0, len(items), batch):
        chunk = items[lo:lo + batch]
        rows = [trees[ti].prompt_ids + trees[ti].nodes[nid].prefix_ids + trees[ti].nodes[nid].sentence_ids
                for ti, nid in chunk]
        targets = [len(trees[ti].nodes[nid].sentence_ids) for ti, nid in chunk]
        width, keep = max(map(len, rows)), max(targets) + 1
        # left padding: every row's sentence ends at the last position; positions are the model's own
        enc = batch_rows(rows, [feats[ti] for ti, _ in chunk], pad, dict(response_fill(vlm)), side="left")
        enc = to_device(enc, device, model.dtype)
        ids = enc["input_ids"].cpu()
        with torch.inference_mode():
            kw, _ = model_kwargs(model, enc, first=True, use_cache=False)
            logits = model(**{**kw, "logits_to_keep": keep}).logits.float()  # once, whatever kw holds (Mllama)
        lp = torch.log_softmax(logits[:, :-1], -1).cpu()  # window position j predicts kept token j + 1
        for i, ((ti, nid), n_t) in enumerate(zip(chunk, targets)):
            tgt = ids[i, width - n_t:]
            tok_lp = lp[i, keep - 1 - n_t:].gather(1, tgt[:, None]).squeeze(1)
            out[ti][nid] = float(tok_lp.mean())
    return out


def _prompt_features(vlm, trees: Sequence[Tree], image_root: str | Path) -> list[dict]:
    """The full processor output of each tree's prompt (InternVL's patches, Qwen's grid, ...), encoded the
    way generation encoded it; a prompt that encodes differently now would score other tokens."""
    from evalsuite.errors import UserError
    from training.csr.generate import encode_prompt

    features = []
    for t in trees:
        ids, feats = encode_prompt(vlm, image_root, t.image, t.question)
        if ids != t.prompt_ids:
            raise UserError(f"tree {t.id}: its prompt encodes differently now than at generation "
                            "(changed system_prompt, chat_template or image_aspect?)")
        features.append(feats)
    return features


def score_trees(vlm, scorer, trees: Sequence[Tree], image_root: str | Path, cfg: RewardConfig) -> list[dict]:
    """Per tree {"id", "nodes": {node id: {"lm", "clip", "cos"}}} for every scorable node."""
    from evalsuite.files import safe_join
    from evalsuite.models.vlm import load_image

    images = [load_image(safe_join(image_root, t.image)) for t in trees]
    if cfg.language_score == "teacher_forced":
        lm = language_scores(vlm, trees, None, cfg.lm_batch, image_root=image_root)
    else:  # the released ranking: the score the search gave the sentence
        lm = [{nid: t.nodes[nid].sentence_score for nid in scorable(t)} for t in trees]
    items = [(ti, nid) for ti, t in enumerate(trees) for nid in scorable(t)]
    texts = [clip_texts(vlm, t, scorable(t), cfg.clip_text) for t in trees]
    flat = [x for per_tree in texts for x in per_tree]
    # PIL images are hashed by content in the scorer's cache, so each image is encoded once.
    clip, cos = scorer.score_texts([(images[ti], text) for (ti, _), text in zip(items, flat)])
    out = [{"id": t.id, "nodes": {}} for t in trees]
    for (ti, nid), r, c in zip(items, clip, cos):
        out[ti]["nodes"][nid] = {"lm": lm[ti][nid], "clip": float(r), "cos": float(c)}
    return out
