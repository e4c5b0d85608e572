"""How few model forwards an exact CSR search can take for a set of prompts: the level floor, and what
multi-token (speculative) verification with n-gram drafts would leave of it.

    OMP_NUM_THREADS=1 python bench/csr_floor.py --prompts 16 [--ckpt DIR] [--draft 2,4,8]

Grows the trees with `tree.engine: pool` (the released rules, as bench/csr_generate.py; configs/csr.yaml's bounds:
no count caps, `kv_budget: auto`, or `--kv-budget N` tokens), once as configured (a node's beams share its
context: `tree.share_prefix`) and once with `share_prefix: false` (each beam row its own copy), and prints the
KV tokens each searching node held in either, counted from the pool's rows. `--image-size 336 --patch-size 14`
builds the tiny checkpoint with LLaVA-1.5-7B's 576 image tokens. Then it computes from
the trees themselves, with no further model call:

* level floor: a level's nodes exist only once the parent level is pruned, and a node's search takes at
  least one forward per token of its longest kept sentence (the first token's logits come with the forward
  that feeds the node's context; a search may run longer than its kept sentences, so this is a lower bound). So a prompt needs the sum over its levels of its longest node, whatever the batching;
  prompts run side by side, so the set needs the largest such sum.
* speculative bound: each beam row proposes `k` draft tokens (the continuation of the longest n-gram, n <= 3,
  that ends its context, looked up in its own context and then in the tree's earlier levels), and one forward
  verifies them all. A group advances while its chosen tokens equal its drafts (then the logits of the next
  step were computed by the same forward); group g may not pass group g-1, whose tokens at a step set g's
  diversity penalty there. The count is the critical path of that schedule: a lower bound for any engine
  using such drafts (verification costs k+1 positions per row in every forward).
Both are lower bounds computed from the trees grown: no model is needed once they exist.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def draft(ctx: list[int], corpus: list[list[int]], k: int, max_n: int = 3) -> list[int]:
    """The k tokens that followed the most recent earlier occurrence of ctx's last n tokens (longest n
    first): in ctx itself, then in the corpus sentences; [] when none."""
    for n in range(min(max_n, len(ctx)), 0, -1):
        tail = ctx[-n:]
        for seq, own in [(ctx, True)] + [(s, False) for s in corpus]:
            for i in range(len(seq) - n - (1 if own else 0), -1, -1):
                if seq[i:i + n] == tail and i + n < len(seq):
                    return seq[i + n:i + n + k]
    return []


def node_forwards(prefix: list[int], sentences: list[list[int]], corpus: list[list[int]], k: int) -> int:
    """Forwards one node's search takes: k = 0 one per token of its longest sentence, else the verification
    schedule of the module docstring."""
    longest = max(len(s) for s in sentences)
    if k == 0:
        return longest
    pos, forwards = [1] * len(sentences), 1  # the first token: from the forward that fed the context
    while any(p < len(s) for p, s in zip(pos, sentences)):
        new = list(pos)
        for g, s in enumerate(sentences):
            if pos[g] >= len(s):
                continue
            d = draft(prefix + s[:pos[g]], corpus, k)
            ok = 0
            while ok < len(d) and pos[g] + ok < len(s) and d[ok] == s[pos[g] + ok]:
                ok += 1
            ahead = [new[h] for h in range(g) if new[h] < len(sentences[h])]
            new[g] = min([pos[g] + 1 + ok, len(s)] + ahead)
        pos, forwards = [max(a, b) for a, b in zip(new, pos)], forwards + 1
    return forwards


def critical_forwards(trees, k: int) -> int:
    worst = 0
    for tree in trees:
        by_depth: dict[int, list] = {}
        for node in tree.nodes:
            if node.children:
                by_depth.setdefault(node.depth, []).append(node)
        total, corpus = 0, []
        for depth in sorted(by_depth):
            level = by_depth[depth]
            total += max(node_forwards(list(tree.prompt_ids) + node.response_ids,
                                       [tree.nodes[c].sentence_ids for c in node.children], corpus, k)
                         for node in level)
            corpus += [tree.nodes[c].sentence_ids for node in level for c in node.children]
        worst = max(worst, total)
    return worst


def node_kv(trees, beams: int, image_id: int, image_tokens: int | None = None) -> dict:
    """KV tokens a searching node holds at the end of its search, over the expanded nodes, by formula from the
    trees (the pool counts what it held: `Stats.node_kv_tokens`): `before` prefix sharing (`tree.share_prefix:
    false`: each of its `beams` rows holds the node's context, prompt + image + response so far, and its own
    sentence) and `after` (the context once, each beam's sentence on top). image_tokens: count the prompt's
    image placeholder tokens as this many (a 7B model's 576) instead of the model's own."""
    before, after = [], []
    for tree in trees:
        img = sum(1 for t in tree.prompt_ids if t == image_id)
        prompt = len(tree.prompt_ids) - img + (img if image_tokens is None else image_tokens)
        for node in tree.nodes:
            if node.children:
                ctx = prompt + len(node.response_ids)
                sent = max(len(tree.nodes[c].sentence_ids) for c in node.children)
                before.append(beams * (ctx + sent))
                after.append(ctx + beams * sent)
    return {"before": sum(before) / len(before), "after": sum(after) / len(after),
            "before_max": max(before), "after_max": max(after)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", default=None)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=20)
    ap.add_argument("--max-depth", type=int, default=4)
    ap.add_argument("--draft", default="2,4,8", help="draft lengths k to bound")
    ap.add_argument("--kv-budget", default="auto", help="tree.kv_budget of the pool run (tokens, or auto)")
    ap.add_argument("--image-size", type=int, default=None,
                    help="build the tiny checkpoint with this image size (336 with --patch-size 14: 576 image "
                         "tokens, LLaVA-1.5-7B's); not with --ckpt")
    ap.add_argument("--patch-size", type=int, default=None, help="with --image-size")
    args = ap.parse_args()
    if (args.image_size is None) != (args.patch_size is None) or (args.image_size and args.ckpt):
        print("--image-size and --patch-size go together, and only without --ckpt", file=sys.stderr)
        return 2
    import torch

    from csr_generate import bench_inputs, run_engine
    from evalsuite.models.vlm import load_vlm

    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="csr_floor_"))
    build = {} if args.image_size is None else {"image_size": args.image_size, "patch_size": args.patch_size}
    ckpt, records = bench_inputs(tmp, args.prompts, args.ckpt, **build)  # bench/csr_generate.py's inputs
    budget = args.kv_budget if args.kv_budget == "auto" else int(args.kv_budget)
    # the pool as configured (tree.share_prefix: a node's beams share its context), then with each beam
    # row holding its own copy: the KV each node held, counted from the rows the pool held
    res, trees = run_engine(load_vlm(ckpt, device="cpu"), tmp, records, "pool", args.max_new_tokens,
                            args.max_depth, warm=False, kv_budget=budget)
    own, own_trees = run_engine(load_vlm(ckpt, device="cpu"), tmp, records, "pool", args.max_new_tokens,
                                args.max_depth, warm=False, kv_budget=budget, share_prefix=False)
    n = res["sentences"]
    if not n:
        print("no candidate sentences were grown: nothing to bound")
        return 1
    print(f"{args.prompts} prompts, {n} candidate sentences; pool engine (kv_budget {args.kv_budget}): "
          f"{res['forwards']} forwards ({res['forwards_per_1k']:.1f} per 1,000 sentences), peak KV "
          f"{res['peak_kv_tokens']:,} tokens")
    floor = critical_forwards(trees, 0)
    print(f"level floor: {floor} forwards ({1000 * floor / n:.1f} per 1,000); the pool at "
          f"{res['forwards'] / floor:.2f}x the floor")
    from bench.tree_diff import differences

    diff = differences(own_trees, trees)
    print(f"each beam row with its own context copy (share_prefix false): {own['forwards']} forwards "
          f"({own['forwards_per_1k']:.1f} per 1,000), peak KV {own['peak_kv_tokens']:,} tokens; trees differing "
          f"from the shared pool's: {len(diff)} of {len(trees)} ({sum(d.near_tie() for d in diff)} near-ties)")
    print(f"KV tokens a searching node held when its search ended, counted from the pool's rows (mean / max over "
          f"{res['nodes_searched']} nodes): {own['node_kv_mean']:,.0f} / {own['node_kv_max']:,} with a copy per beam "
          f"row; {res['node_kv_mean']:,.0f} / {res['node_kv_max']:,} shared by the beams "
          f"({own['node_kv_mean'] / res['node_kv_mean']:.1f}x less)")
    vlm = load_vlm(ckpt, device="cpu")
    image_id = vlm.tokenizer.convert_tokens_to_ids(vlm.inputs.image_token)
    for label, img in (("this model", None), ("576 image tokens (LLaVA-1.5-7B)", 576)):
        kv = node_kv(trees, 5, image_id, img)
        print(f"by formula from the trees, KV tokens a searching node holds ({label}): {kv['before']:,.0f} mean, {kv['before_max']:,} at most "
              f"(5 beam rows, each with the context); with the context shared by its beams "
              f"{kv['after']:,.0f} mean, {kv['after_max']:,} at most ({kv['before'] / kv['after']:.1f}x less)")
    for k in (int(x) for x in args.draft.split(",")):
        f = critical_forwards(trees, k)
        print(f"speculative, {k} n-gram draft tokens per row: {f} forwards ({1000 * f / n:.1f} per 1,000)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
