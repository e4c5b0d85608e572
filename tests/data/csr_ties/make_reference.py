"""Runs the released CSR pair selection on random tie-heavy trees and writes released.json (read by
tests/unit/test_csr_tie_order.py). Not part of the test run: it needs a checkout of the released code.

    python make_reference.py /path/to/YiyangZhou/CSR   # at 353de42

What it runs, unmodified, from that checkout: inference_csr/utils.py's `Rank_Node` (with its
`calculate_ranks`) and inference_csr/construct.py's `dfs`; then construct.py's `process_data` steps
restated on their output: the paths stable-sorted by cumulative cost / len(path), chosen = the first,
rejected = the last, with `clip_alpha` 0.9 (step3.sh's) for a third of the trees and 0.0 / 1.0 (a
cost that is exactly a rank, so more ties) for the others. Unused imports of utils.py are replaced
by empty stand-ins so it loads without torch / transformers.

The trees (our own generator, seeded): nodes are numbered in the order our tree search creates them
(breadth first, children in their listed order); a node is final (a leaf) or not, and a non-final node
may have no children (pruned). Language and CLIP scores come from small sets so siblings and paths tie.
"""
from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "csr_clean"))
from make_reference import _stub_imports  # the same stand-ins


def random_tree(rng: random.Random) -> list[dict]:
    """[{id, parent, final, lm, cos, children}] in creation order (breadth first)."""
    nodes = [{"id": 0, "parent": None, "final": False, "lm": None, "cos": None, "children": []}]
    level = [0]
    depth = 0
    while level:
        depth += 1
        nxt = []
        for nid in level:
            for _ in range(rng.choice([1, 2, 2, 4]) if rng.random() < 0.7 else rng.randint(1, 5)):
                final = depth >= 3 or rng.random() < 0.4
                child = {"id": len(nodes), "parent": nid, "final": final, "lm": rng.choice([-1.0, -2.0]),
                         "cos": rng.choice([0.1, 0.2]), "children": []}
                nodes.append(child)
                nodes[nid]["children"].append(child["id"])
                if not final and rng.random() < 0.6:
                    nxt.append(child["id"])
        level = nxt[:3]  # as the search keeps a few partial responses per depth; the rest stay unexpanded
    return nodes


def main(checkout: str, n_trees: int = 240, seed: int = 0) -> None:
    root = Path(checkout)
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    _stub_imports()
    sys.path.insert(0, str(root / "inference_csr"))
    spec = importlib.util.spec_from_file_location("utils", root / "inference_csr" / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    sys.modules["utils"] = utils
    spec.loader.exec_module(utils)
    spec = importlib.util.spec_from_file_location("csr_construct", root / "inference_csr" / "construct.py")
    construct = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(construct)

    rng = random.Random(seed)
    out = []
    while len(out) < n_trees:
        nodes = random_tree(rng)
        if not any(n["final"] for n in nodes):
            continue  # construct.py crashes on a tree without a complete path
        rank = [utils.Rank_Node(text=str(n["id"]), score=n["lm"], depth=0, is_final=n["final"],
                                clip_score=n["cos"]) for n in nodes]
        for n in nodes:
            for c in n["children"]:
                rank[n["id"]].add_child(rank[c])
        rank[0].calculate_ranks()
        alpha = (0.9, 0.0, 1.0)[len(out) % 3]  # step3.sh's 0.9; 0 and 1 make costs exact ranks (more ties)
        results = construct.dfs(rank[0], clip_alpha=alpha)
        ordered = sorted(results, key=lambda x: x[1] / len(x[0]))
        chosen, rejected = ordered[0][0], ordered[-1][0]
        out.append({"clip_alpha": alpha, "nodes": nodes, "dfs_paths": [[int(t) for t, _ in p] for p, _ in results],
                    "chosen": [int(t) for t, _ in chosen], "rejected": [int(t) for t, _ in rejected]})
    doc = {"source": f"YiyangZhou/CSR@{commit}: inference_csr/utils.py Rank_Node.calculate_ranks, "
                     "inference_csr/construct.py dfs + its stable sort",
           "python": sys.version.split()[0], "seed": seed, "trees": out}
    Path(__file__).with_name("released.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"{len(out)} trees")


if __name__ == "__main__":
    main(sys.argv[1])
