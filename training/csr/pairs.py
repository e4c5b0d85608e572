"""Chosen/rejected pairs from scored trees, their training files and per-iteration statistics.

One pair per prompt (docs/csr-method.md §3.2(g)): the complete response with the highest reward is
chosen, the lowest rejected (rank mode: lowest / highest mean cost). `PairConfig` says what DPO then
sees: the human turn (`template`), whether text generated after an EOS stays (`post_eos`) and whether
prompts are skipped, and counted, when they have fewer than `min_paths` distinct complete responses,
when the two sides decode to the same text, or when the reward gap is below `min_gap` (`guards`; the
released code has none).

File (written atomically):
  * `pairs.json`       LLaVA style, read by the trainer as dataset `csr_pairs`:
        {"id", "image" (relative to image_root), "conversations": [{"from": "human", "value": human},
        {"from": "gpt", "value": chosen}], "rejected_conversations": [...]}, human = "<image>\\n{question}"
        (template: single) or the templated generation prompt, with "template": "released"
Statistics: a `TaskResult(task="csr_pairs")` with the chosen/rejected reward and relevance means, the
gap, #pairs and #skipped, plus one sample record per pair, written to the results store.
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from training.csr.config import PairConfig, RewardConfig
from training.csr.generate import Tree
from training.csr.reward import PathReward, path_rewards

log = logging.getLogger(__name__)

TASK = "csr_pairs"
VERSION = "1"


@dataclass
class Pair:
    id: str
    image: str
    question: str
    chosen: str
    rejected: str
    chosen_reward: float
    rejected_reward: float
    num_paths: int
    chosen_relevance: float | None = None
    rejected_relevance: float | None = None
    human: str | None = None  # template: released: the templated generation prompt (None = "<image>\n{question}")


def select_pair(paths: Sequence[PathReward], cfg: PairConfig) -> tuple[PathReward, PathReward] | str:
    """(chosen, rejected), or the reason the prompt is skipped. Ties keep path order (`pairs.tie_order`
    says which order `paths` are in), so with equal rewards chosen is the first path and rejected the last.
    `tie_order: released` sorts by the path's `key` (rank mode: the mean cost, construct.py's key), else
    by reward. Without guards one path is both sides."""
    if not cfg.guards:
        if not paths:
            return "no_paths"
    elif len(paths) < cfg.min_paths:
        return "too_few_paths"
    if cfg.tie_order == "released":
        key = [p.key if p.key is not None else -p.reward for p in paths]
    else:
        key = [-p.reward for p in paths]
    order = sorted(range(len(paths)), key=lambda i: (key[i], i))
    chosen, rejected = paths[order[0]], paths[order[-1]]
    if cfg.guards and cfg.min_gap is not None and chosen.reward - rejected.reward < cfg.min_gap:
        return "gap_below_min"
    return chosen, rejected


def response_text(tokenizer, tree: Tree, path: PathReward, post_eos: str) -> str:
    """The decoded response of a path: cut before its first EOS, or (`keep`) every generated token of
    its last sentence, what followed the EOS included, special tokens out (the released leaf text)."""
    if post_eos == "cut":
        ids = path.response_ids
    else:
        leaf = tree.nodes[path.path[-1]]
        ids = leaf.prefix_ids + leaf.sentence_ids
    return tokenizer.decode(ids, skip_special_tokens=True).strip()


def build_pairs(trees: Sequence[Tree], scores: Sequence[dict], tokenizer, reward: RewardConfig,
                cfg: PairConfig, prompts: Sequence[str] | None = None) -> tuple[list[Pair], Counter]:
    """Pairs in tree order and a Counter of skip reasons. prompts: each tree's generation prompt string
    (`evalsuite.models.vlm.build_prompt`), required by `template: released`."""
    if cfg.template == "released" and (prompts is None or len(prompts) != len(trees)):
        raise ValueError("pairs.template released needs each tree's generation prompt")
    pairs: list[Pair] = []
    skipped: Counter = Counter()
    for i, (tree, sc) in enumerate(zip(trees, scores)):
        node_scores = {int(k): v for k, v in sc["nodes"].items()}
        paths = path_rewards(tree, node_scores, reward, distinct=cfg.guards, order=cfg.tie_order)
        picked = select_pair(paths, cfg)
        if isinstance(picked, str):
            skipped[picked] += 1
            continue
        chosen, rejected = (response_text(tokenizer, tree, p, cfg.post_eos) for p in picked)
        if cfg.guards and chosen == rejected:
            skipped["same_text"] += 1
            continue
        human = prompts[i].strip() if cfg.template == "released" else None
        pairs.append(Pair(id=tree.id, image=tree.image, question=tree.question, chosen=chosen, rejected=rejected,
                          chosen_reward=picked[0].reward, rejected_reward=picked[1].reward, num_paths=len(paths),
                          human=human))
    return pairs, skipped


def released_human_turn(vlm, question: str) -> str:
    """The human turn of `pairs.template: released`: the templated generation prompt (construct.py's), its
    image placeholder written as the pair file's "<image>", which the `csr_pairs` reader strips as the
    released DPO does. A family whose placeholder is another token (Qwen-VL's <|image_pad|>, Mllama's
    <|image|>) would otherwise reach DPO with two placeholders for one image (the processor refuses it)."""
    from evalsuite.models.vlm import build_prompt

    token = vlm.inputs.image_token
    return build_prompt(vlm, question).replace(token, "<image>")


def no_pairs_message(iteration: int, trees: Sequence[Tree], scores: Sequence[dict], skipped: Counter,
                     reward: RewardConfig, guards: bool = True) -> str:
    """One line saying why an iteration has no pairs: trees, complete paths, paths with a judged sentence
    (those `path_rewards` keeps), the rule that dropped each tree and the settings that decide it
    (min_paths / min_gap only with pairs.guards: true, where they can be set at all)."""
    complete = sum(len(t.complete_paths()) for t in trees)
    judged = sum(len(path_rewards(t, {int(k): v for k, v in sc["nodes"].items()}, reward))
                 for t, sc in zip(trees, scores))
    rules = ", ".join(f"{k}={v}" for k, v in sorted(skipped.items())) or "none"
    return (f"iteration {iteration}: no preference pairs from {len(trees)} trees ({complete} complete paths, "
            f"{judged} with a usable sentence; trees dropped by rule: {rules}); nothing to train on "
            f"({'pairs.min_paths / pairs.min_gap, ' if guards else ''}tree.max_new_tokens, tree.max_depth)")


def add_relevance(pairs: Sequence[Pair], scorer, image_root: str | Path) -> None:
    """The relevance metric of evalsuite (sentence-mean CLIP score) of both sides of every pair."""
    from evalsuite.files import safe_join

    items = []
    for p in pairs:
        img = safe_join(image_root, p.image)
        items += [(img, p.chosen), (img, p.rejected)]
    scored = scorer.score_responses(items)
    for i, p in enumerate(pairs):
        p.chosen_relevance, p.rejected_relevance = scored[2 * i].score, scored[2 * i + 1].score


def llava_record(p: Pair) -> dict:
    human = {"from": "human", "value": p.human if p.human is not None else f"<image>\n{p.question}"}
    rec = {"id": p.id, "image": p.image,
           "conversations": [human, {"from": "gpt", "value": p.chosen}],
           "rejected_conversations": [human, {"from": "gpt", "value": p.rejected}]}
    if p.human is not None:  # the `csr_pairs` reader takes this templated human turn as is
        rec["template"] = "released"
    return rec


def write_pair_files(out_dir: str | Path, pairs: Sequence[Pair]) -> Path:
    """pairs.json (csr_pairs), the file the DPO stage reads; returns its path."""
    from evalsuite.files import write_json_atomic

    out_dir = Path(out_dir)
    return write_json_atomic(out_dir / "pairs.json", [llava_record(p) for p in pairs])


def _mean(xs: Sequence[float | None]) -> float:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else float("nan")


def pair_stats(pairs: Sequence[Pair], skipped: Counter, reward: RewardConfig, config: dict | None = None,
               identity: dict | None = None):
    """The iteration's `TaskResult` (metrics + one sample record per pair); `identity`: what makes two
    iterations' statistics comparable (training/csr/loop.py pairs_identity), given, never patched in later."""
    from evalsuite.types import MetricValue, TaskResult

    n = len(pairs)
    c, r = _mean([p.chosen_reward for p in pairs]), _mean([p.rejected_reward for p in pairs])
    metrics = [
        MetricValue("chosen_reward_mean", c, True, n=n),
        MetricValue("rejected_reward_mean", r, True, n=n),
        MetricValue("reward_gap", c - r, True, n=n),
        MetricValue("chosen_relevance_mean", _mean([p.chosen_relevance for p in pairs]), True, n=n),
        MetricValue("rejected_relevance_mean", _mean([p.rejected_relevance for p in pairs]), True, n=n),
        MetricValue("num_pairs", float(n), True),
        MetricValue("num_skipped", float(sum(skipped.values())), False),
    ]
    samples = [{"id": p.id, "key": p.id, "image": p.image, "prompt": p.question, "chosen": p.chosen,
                "rejected": p.rejected, "chosen_reward": p.chosen_reward, "rejected_reward": p.rejected_reward,
                "chosen_relevance": p.chosen_relevance, "rejected_relevance": p.rejected_relevance,
                "num_paths": p.num_paths} for p in pairs]
    definition = ("1 - mean sibling-rank cost (higher is better)" if reward.mode == "rank"
                  else "sum of lam*R_I + (1-lam)*100*exp(mean logp) over sentences")
    return TaskResult(task=TASK, version=VERSION, metrics=metrics, samples=samples,
                      config={**(config or {}), "reward_mode": reward.mode, "lam": reward.lam,
                              "reward_definition": definition, "relevance": "sentence_mean CLIP score"},
                      extra={"skipped": dict(skipped)}, identity=dict(identity or {}))
