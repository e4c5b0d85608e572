"""The tree rules of CSR's sentence-level search (docs/csr-method.md §2), shared by every tree engine
(`training.csr.engines`: reference, pool, vllm): how a tree starts, how a node's candidate sentences become its
children, which children are final or junk, how a level is pruned, and how a tree is finished.

A tree per (image, question). The root is the prompt; every other node is one sentence, stored as
token ids (never decoded and re-encoded: the original's string offsets broke across versions):

    prefix_ids    response tokens before this sentence     sentence_ids  this sentence's tokens
    text          the sentence decoded (special tokens out) sentence_score the search's score of it
    lm_score      cumulative search score                   eos_at        index of EOS in sentence_ids
    depth, parent, children, is_final, status ("active" | "expanded" | "pruned" | "end" |
                  "dropped:<rule>" | "dropped:ancestor")

Every node of a level is searched, each candidate sentence becomes a child (`TreeRules.add_children`),
and per prompt the live children are pruned to the `keep_top` best and `keep_bottom` worst by cumulative
LM score (`TreeRules.prune`; the worst are kept on purpose: they become the rejected side). Where
sentences end, when a branch is final, whether duplicate siblings are kept and when junk is dropped follow
`TreeConfig` (`stop`, caps, `dedupe_siblings`, `junk_filter`); the defaults are the released sampler's
(docs/csr-fidelity.md). With `stop: sentence_marks` a candidate that is only EOS ends the response where
its parent ends: it is kept as an empty final node with status "end". An engine decides only when each
node is searched: the rules give every engine the same node ids and statuses.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from evalsuite.gen_settings import GroupBeamSettings, shared
from training.csr.clean import junk_reason
from training.csr.config import TreeConfig


@dataclass
class Node:
    id: int
    parent: int | None
    depth: int
    prefix_ids: list[int]
    sentence_ids: list[int]
    text: str
    sentence_score: float
    lm_score: float
    is_final: bool = False
    eos_at: int | None = None
    status: str = "active"
    children: list[int] = field(default_factory=list)

    @property
    def has_eos(self) -> bool:
        return self.eos_at is not None

    @property
    def response_ids(self) -> list[int]:
        """The whole response up to this sentence, cut before its first EOS (with `stop: released` the
        search runs past EOS to the next "."; what follows EOS never enters a response)."""
        sentence = self.sentence_ids if self.eos_at is None else self.sentence_ids[:self.eos_at]
        return self.prefix_ids + sentence

    @property
    def usable(self) -> bool:
        return not self.status.startswith("dropped")


@dataclass
class Tree:
    id: str
    image: str
    question: str
    prompt_ids: list[int]
    nodes: list[Node]

    def complete_paths(self, order: str = "released") -> list[list[int]]:
        """Node ids root -> final leaf for every complete, undropped response, listed depth first with
        children in the order the search returned them (`released`: construct.py's `dfs`), or by leaf
        node id (`node_id`: the breadth-first order nodes are created in)."""
        leaves = [node for node in self.nodes if node.is_final and node.usable]
        if order == "released":
            pos, stack = {}, [0]
            while stack:
                nid = stack.pop()
                pos[nid] = len(pos)
                stack.extend(reversed(self.nodes[nid].children))
            leaves.sort(key=lambda node: pos[node.id])
        elif order != "node_id":
            raise ValueError(f"path order {order!r} is not one of ('released', 'node_id')")
        paths = []
        for node in leaves:
            path, cur = [], node
            while cur is not None:
                path.append(cur.id)
                cur = self.nodes[cur.parent] if cur.parent is not None else None
            paths.append(path[::-1])
        return paths

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Tree":
        return cls(id=d["id"], image=d["image"], question=d["question"], prompt_ids=d["prompt_ids"],
                   nodes=[Node(**n) for n in d["nodes"]])


def period_id(tokenizer, configured: int | None) -> int:
    """The released rule's one sentence-end token: `configured`, else the vocabulary's "." token."""
    from evalsuite.errors import UserError

    pid = configured if configured is not None else tokenizer.convert_tokens_to_ids(".")
    if pid is None or not 0 <= pid < len(tokenizer) or (configured is None and pid == tokenizer.unk_token_id):
        raise UserError("tree.period_id: the tokenizer has no '.' token; set tree.period_id to its id")
    return pid


def sentence_end_ids(tokenizer, marks: Sequence[str]) -> list[int]:
    """Ids of every vocabulary token that decodes to just a sentence mark ('.', ' .', ...)."""
    wanted = set(marks)
    ids = []
    for token_id in range(len(tokenizer)):
        if token_id in tokenizer.all_special_ids:
            continue
        if tokenizer.decode([token_id]).strip() in wanted:
            ids.append(token_id)
    return ids


@dataclass
class Stats:
    """What a tree engine did (the benches add forward hooks for forwards, rows and vision passes):
    `sentences` candidate sentences produced (every engine); the pool's counters of search steps, host
    reads, prefill tokens and peak KV tokens held (zero on the other engines)."""

    sentences: int = 0
    steps: int = 0
    host_bytes: int = 0
    prefill_tokens: int = 0  # real (unmasked) tokens fed by prefill forwards (prompts + sentences)
    prompt_tokens: int = 0   # of which prompt prefills
    nodes_prefilled: int = 0
    peak_tokens: int = 0
    # pool: KV columns each node's rows held when its search ended (left padding not counted), summed, and
    # the most; over `nodes_searched`
    node_kv_tokens: int = 0
    node_kv_max: int = 0
    nodes_searched: int = 0

    def host(self, t):
        """`t` (a device tensor) on the host, its bytes counted."""
        self.host_bytes += t.numel() * t.element_size()
        return t.cpu()


@dataclass
class Prompt:
    """A tree being grown: the tree, the prompt's per-sample processor tensors
    (evalsuite.models.inputs.split_sample) and the nodes of the level being searched."""

    tree: Tree
    features: dict[str, Any]
    active: list[int]
    engine_prompt: Any = None  # tree.engine vllm: (ids with one image placeholder, prepared image), made by the engine


class TreeRules:
    """The tree rules for one loaded `evalsuite` VLM (its tokenizer decodes and measures the sentences) and one
    `TreeConfig`; `spec` is the search every engine runs per node."""

    def __init__(self, vlm, cfg: TreeConfig, image_root: str | Path):
        from evalsuite.models.vlm import placeholder_token_ids, suppressed_token_ids
        from training.csr.search import SearchSpec

        self.vlm, self.cfg, self.image_root = vlm, cfg, Path(image_root)
        tok = vlm.tokenizer
        self.eos_id = tok.eos_token_id
        if cfg.stop == "released":  # sample.py passes the "." id as eos_token_id: EOS is an ordinary token
            stops = [period_id(tok, cfg.period_id)]
        else:
            stops = sentence_end_ids(tok, cfg.sentence_end) + [self.eos_id]
        # Released: nothing suppressed (sample.py's plain generate); ours bans <image>, pad and BOS. The
        # image/video placeholders are banned either way: a child's context is fed back to the model, which
        # refuses a placeholder without its features, and the released LLaVA cannot emit one (its image
        # index -200 lies outside the vocabulary; HF checkpoints add it as a token).
        m = vlm.model
        banned = (suppressed_token_ids(vlm.processor, m.config, m.generation_config) if cfg.suppress_special_tokens
                  else placeholder_token_ids(vlm.processor, m.config))
        suppress = [i for i in banned if i != self.eos_id]
        # sample.py passes the tokenizer's pad; generate() falls back to the first eos id (the stop).
        # The search feeds it to the diversity penalty for groups that are done, so it matters.
        pad = tok.pad_token_id if tok.pad_token_id is not None else stops[0]
        self.pad_id = tok.pad_token_id
        self.image_id = tok.convert_tokens_to_ids(vlm.inputs.image_token)  # a str even where the processor holds an AddedToken
        self.spec = SearchSpec(**shared(cfg, GroupBeamSettings), stop_ids=tuple(stops),
                               suppress_ids=tuple(suppress), pad_id=pad, response_fill=response_fill(vlm))

    def start(self, record: dict) -> Prompt:
        """A tree of one prompt record {id, image, question}: its root, the prompt encoded (image included)."""
        prompt_ids, features = encode_prompt(self.vlm, self.image_root, record["image"], record["question"])
        root = Node(id=0, parent=None, depth=0, prefix_ids=[], sentence_ids=[], text="",
                    sentence_score=0.0, lm_score=0.0)
        tree = Tree(id=str(record["id"]), image=record["image"], question=record["question"],
                    prompt_ids=prompt_ids, nodes=[root])
        return Prompt(tree=tree, features=features, active=[0])

    def add_children(self, tree: Tree, nid: int, hyps) -> None:
        """Node `nid` was searched: its candidate sentences `hyps` (best first) become its children, each
        with its status (final, junk under `junk_filter: before_pruning`, or active)."""
        parent = tree.nodes[nid]
        parent.status = "expanded"
        longest = max((len(h.ids) for h in hyps), default=0)
        seen: set[tuple[int, ...]] = set()
        kids: list[Node] = []
        for h in hyps:  # best first, so a duplicate keeps the better score
            if self.cfg.dedupe_siblings and h.ids in seen:
                continue
            seen.add(h.ids)
            ids = list(h.ids)
            eos_at = ids.index(self.eos_id) if self.eos_id in ids else None
            # Special tokens out; with `stop: released` text after an EOS stays in the sentence, as
            # in the released tree (it is scored, but never enters a pair's response).
            text = self.vlm.tokenizer.decode(ids, skip_special_tokens=True).strip()
            child = Node(id=len(tree.nodes), parent=nid, depth=parent.depth + 1,
                         prefix_ids=parent.response_ids, sentence_ids=ids, text=text,
                         sentence_score=h.score, lm_score=parent.lm_score + h.score, eos_at=eos_at)
            tree.nodes.append(child)  # in the tree before its status: the released junk rules read its parent's text
            parent.children.append(child.id)
            kids.append(child)
        # one pass over the siblings (the released rules decode the parent's text once for all of them)
        reasons = self._junk(tree, kids) if self.cfg.junk_filter == "before_pruning" else {}
        for child in kids:
            child.status = self.status(tree, child, longest - len(child.sentence_ids), reasons.get(child.id))
            child.is_final = child.status in ("end", "final")

    def status(self, tree: Tree, child: Node, pads: int, junk: str | None) -> str:
        """`junk`: the junk rule the child breaks under `junk_filter: before_pruning` (None: none, or after)."""
        cfg = self.cfg
        if cfg.stop == "sentence_marks" and child.has_eos and not child.text:
            return "end"
        if junk:
            return f"dropped:{junk}"
        return "final" if child.has_eos or self._at_cap(tree, child, pads) else "active"

    def _at_cap(self, tree: Tree, child: Node, pads: int) -> bool:
        cfg = self.cfg
        if cfg.max_depth is not None and child.depth >= cfg.max_depth:
            return True
        if cfg.max_response_tokens is not None and len(child.prefix_ids) + len(child.sentence_ids) >= cfg.max_response_tokens:
            return True
        return cfg.max_chars is not None and self._chars(tree, child, pads) >= cfg.max_chars

    def _chars(self, tree: Tree, child: Node, pads: int) -> int:
        """Characters of the decoded sequence as sample.py measures it: prompt + response + this
        sentence, special tokens kept, the image placeholder once (its processor did not expand it),
        and the `pads` pad tokens HF's beam search appends to the shorter candidates of one call."""
        head = [t for i, t in enumerate(tree.prompt_ids) if t != self.image_id or i == 0 or tree.prompt_ids[i - 1] != t]
        tail = [self.pad_id] * pads if self.pad_id is not None else []
        return len(self.vlm.tokenizer.decode(head + child.prefix_ids + child.sentence_ids + tail))

    def drop_junk(self, tree: Tree) -> None:
        """`junk_filter: after_pruning`: junk and too-short sentences go once the tree is grown, with
        their subtrees (score.py's clean_tree + length check)."""
        reasons = self._junk(tree, [n for n in tree.nodes[1:] if n.status != "end"])
        for node in tree.nodes[1:]:  # a parent always precedes its children
            if not tree.nodes[node.parent].usable:
                node.status = "dropped:ancestor"
            elif node.status != "end" and (reason := reasons[node.id]):
                node.status = f"dropped:{reason}"

    def _junk(self, tree: Tree, nodes: list[Node]) -> dict[int, str | None]:
        """The junk rule each node breaks (None: usable), by `tree.junk_rules`: `broad` reads the decoded
        sentence; `released` the node's new text as the released scorer cuts it from its whole decoded
        text (`training.csr.clean.released_new_texts`, the text CLIP reads with `clip_text: released`)."""
        cfg = self.cfg
        if cfg.junk_rules == "broad":
            return {n.id: junk_reason(n.text, cfg.min_sentence_chars, "broad") for n in nodes}
        from training.csr.clean import released_new_texts

        texts = released_new_texts(self.vlm, tree, [n.id for n in nodes])
        return {n.id: junk_reason(t, cfg.min_sentence_chars, "released") for n, t in zip(nodes, texts)}

    def prune(self, tree: Tree, expanded: Iterable[int]) -> list[int]:
        """Next active nodes: live children of this depth, pruned to the best/worst by lm_score."""
        live = [c for nid in expanded for c in tree.nodes[nid].children if tree.nodes[c].status == "active"]
        top, bottom, threshold = self.cfg.pruning()
        if len(live) < max(threshold, 1) or top + bottom >= len(live):
            return live
        # Stable order on ties (node id) keeps batched and one-at-a-time runs identical.
        ranked = sorted(live, key=lambda c: (-tree.nodes[c].lm_score, c))
        keep = set(ranked[:top]) | set(ranked[len(ranked) - bottom:] if bottom else [])
        for c in live:
            if c not in keep:
                tree.nodes[c].status = "pruned"
        return [c for c in live if c in keep]



    def grow_level(self, tree: Tree, level: Sequence[int], hyps: dict[int, Sequence]) -> list[int]:
        """Every node of `level` was searched (`hyps[node]`): their children, in the level's order (node ids
        are given in it), and the level pruned. -> the next level's nodes ([]: the tree is grown)."""
        for nid in level:
            self.add_children(tree, nid, hyps[nid])
        return self.prune(tree, level)

    def finish(self, tree: Tree) -> Tree:
        """A grown tree as it is written: junk dropped once grown under `junk_filter: after_pruning`."""
        if self.cfg.junk_filter == "after_pruning":
            self.drop_junk(tree)
        return tree


def encode_prompt(vlm, image_root: str | Path, image: str, question: str) -> tuple[list[int], dict[str, Any]]:
    """(prompt token ids, per-sample model inputs) of one CSR prompt, through the shared input path
    (`vlm.inputs`: chat template or family format, system prompt, image_aspect)."""
    from evalsuite.files import safe_join
    from evalsuite.models.inputs import split_sample
    from evalsuite.models.vlm import build_prompt, load_image

    im = load_image(safe_join(image_root, image))
    return split_sample(vlm.inputs.encode([build_prompt(vlm, question)], [im]))


def response_fill(vlm) -> tuple[tuple[str, int], ...]:
    """Sequence-aligned input values on response tokens (PaliGemma: token_type_ids 1 = causal suffix)."""
    return (("token_type_ids", vlm.inputs.response_fill("token_type_ids")),)


