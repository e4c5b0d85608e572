"""Typed configuration of the CSR loop (docs/csr-method.md; every default is the released code's unless noted).

Four pieces, each validated on construction so a bad preset fails before any model loads:

* `TreeConfig`   sentence-level search tree (docs/csr-method.md §2): expander, beams/groups/penalty, pruning, caps.
* `RewardConfig` how sentence rewards combine into a path score (docs/csr-method.md §3): mode `rank` | `value`, lambda.
* `PairConfig`   pair selection guards (docs/csr-method.md §3.2(g), §10.1.4): minimum distinct paths, optional min gap.
* `CSRConfig`    the iteration driver (docs/csr-method.md §6): data, models, T, output dir, training and evaluation knobs.

`load_config(path, overrides)` goes through the project's one config mechanism (`evalsuite/config.py`):
nested `tree:`, `reward:`, `pairs:` sections are typed dataclasses, and the `train:` mapping holds
`training.config.TrainConfig` fields, checked (keys, types, values) when the preset is loaded, so a
typo there fails in seconds, not after hours of generation. The loop adds the fields it owns (model,
data, output dir) per iteration.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from evalsuite.config import opt
from evalsuite.errors import UserError
from evalsuite.models.inputs import IMAGE_ASPECTS, MOVED_TO_INPUTS, InputConfig
from evalsuite.run_config import EvalConfig

EXPANDERS = ("group_beam", "sample")
STOP_RULES = ("released", "sentence_marks")
ENGINES = ("pool", "reference", "vllm")
JUNK_FILTERS = ("after_pruning", "before_pruning")
JUNK_RULES = ("released", "broad")
REWARD_MODES = ("rank", "value")
LANGUAGE_SCORES = ("beam", "teacher_forced")
CLIP_TEXTS = ("released", "sentence")
PAIR_TEMPLATES = ("released", "single")
POST_EOS = ("keep", "cut")
TIE_ORDERS = ("released", "node_id")


def _check(cond: bool, where: str, msg: str) -> None:
    if not cond:
        raise UserError(f"{where}: {msg}")


def _other(obj, switch: str, readers: dict[Any, tuple[str, ...]]) -> list[tuple[str, str, Any, Any]]:
    """(field, switch, its value, the value that reads the field) for the fields only another value of
    `switch` reads (readers: {value of switch: the fields only that value reads}); evalsuite/config.py
    `report_unread` refuses such a field set on the command line and warns about one set by a preset."""
    now = getattr(obj, switch)
    return [(name, switch, now, value) for value, names in readers.items() if value != now for name in names]


# Switches added after CSR results existed, at the value that says what runs did before them: pair
# statistics' identity leaves them out at that value (training/csr/loop.py pairs_identity; training/config.py
# EARLIER_MEANING for the train: mapping).
EARLIER_TREE = {"junk_rules": "broad"}
# switches of the `train:` mapping that the loop sets (CSRConfig.train_config): a field they leave unread can
# only be dropped
OWNED_SWITCHES = ("train.method", "train.dataset_name", "train.save_merged")
EARLIER_PAIRS = {"tie_order": "node_id"}


@dataclass
class TreeConfig:
    """Sentence-level search (docs/csr-method.md §2, §10.1.2). Defaults are the released code's; the
    switches naming our changes are listed in docs/csr-fidelity.md.

    expander: `group_beam` (diverse group beam search, the paper's) or `sample` (num_samples draws).
    num_beams / num_beam_groups / diversity_penalty: 5 / 5 / 3.0 = one beam per group, Hamming penalty.
    max_new_tokens: token cap of one sentence (70).
    stop: where a sentence ends.
      `released`: only at the "." token (`period_id`, None = the vocabulary's "." token, LLaMA's 29889).
        EOS does not stop the search: the candidate runs on to the next "." and the branch is final
        (the response is cut at its first EOS when pairs are written).
      `sentence_marks`: at every token that decodes to one of `sentence_end`, or at EOS.
    max_chars / max_response_tokens / max_depth: a branch is final once the decoded prompt + response
      (special tokens kept, the image placeholder once, the padding HF adds to shorter beams included)
      reaches `max_chars` characters (released: 1024), or the response `max_response_tokens` tokens, or
      the tree `max_depth` sentences; null = no such cap (at least one must be set).
    keep_top / keep_bottom: partial responses kept per depth, best and worst by cumulative LM score;
      None = the released code's floor(k/2)-1 and floor(k/2) with k = num_beams (1 and 2).
    prune_threshold: prune only when at least this many live children exist (None = num_beams).
    dedupe_siblings: drop exact-duplicate sibling sentences (released: kept, always `num_beams` children).
    junk_filter: `after_pruning` (released: junk and too-short sentences are dropped, with their
      subtrees, once the tree is grown, so they can hold a pruning slot) or `before_pruning` (ours).
    junk_rules: what junk is (training/csr/clean.py). `released`: the released scorer's rules on the node's
      text past len(parent's text) + 3 characters, whitelisted (the text `reward.clip_text: released`
      gives CLIP). `broad` (ours): wider foreign-script, `&nbsp;`, word-repeat and comma rules on the
      decoded sentence.
    suppress_special_tokens: false (released: the search may emit any token of the released vocabulary;
      an HF checkpoint's image/video placeholder is still never generated, since a context holding one
      cannot be fed back and the released LLaVA's image index lies outside its vocabulary) or true (ours:
      pad and BOS are banned too; `evalsuite.models.vlm.suppressed_token_ids`).
    min_sentence_chars: shorter new sentences are dropped with their subtree (docs/csr-method.md §3.2(b));
      `junk_rules: released` counts the whitelisted new text as it is, `broad` the stripped sentence.
    batch_nodes / prompt_batch: optional caps on the nodes searching at once (rows = nodes x beams) and the
      prompts resident; null (default) = no cap: `kv_budget` alone bounds them. 1 / 1 = one at a time.
    image_aspect: the image preparation the candidates are generated (and LM-scored) from: `crop` (the
      released sampler's HF processor), `pad`, or null = `inputs.image_aspect`.
    engine: how the group beam search runs; both give the same trees (docs/csr-engine.md).
      `pool` (default): a continuously refilled pool of rows with prefix reuse and the search on the
        device (training/csr/pool.py), bounded by `kv_budget`. The sampling expander and families whose
        cache cannot be cut and stacked run the reference path (said in the log).
      `reference`: levels in lockstep over a batch of prompts, the nodes in chunks, every node prefilled
        from its prompt (training/csr/search.py); batch and chunk within `kv_budget` (or the caps).
      `vllm`: a vLLM worker in its own environment (training/csr/vllm_expand.py, docs/engines.md):
        sampled trees differ from HF's draws, not in their rules; group_beam is stepped one token per
        call from top-N log-probs under the pool's continuous refill, bounded by the worker's KV
        capacity where it reports one (training/csr/vllm_beam.py): HF's trees up to near-ties.
    kv_budget: HF engines: cached tokens the search may hold (pool: rows x width + kept contexts), or `auto`
      (half the free CUDA memory; 8 GiB of cache on CPU: training/csr/engines.py). No bound changes a tree.
    A field only the other expander (stop rule, engine) reads would be accepted and ignored: set on the
    command line it is an error naming both fields, set by a preset a warning (`unread`).
    """

    expander: Literal["group_beam", "sample"] = opt(
        "group_beam", "how a node's next sentences are drawn: diverse group beam search (the paper's) or sampling")
    num_beams: int = opt(5, "group_beam: beams (children per node)")
    num_beam_groups: int = opt(5, "group_beam: beam groups (5 of 5 = one beam per group)")
    diversity_penalty: float = opt(3.0, "group_beam: Hamming diversity penalty between groups")
    length_penalty: float = opt(1.0, "group_beam: length penalty of the beam scores")
    num_samples: int = opt(5, "sample: draws (children per node)")
    temperature: float = opt(1.0, "sample: sampling temperature")
    top_p: float = opt(1.0, "sample: nucleus sampling mass")
    max_new_tokens: int = opt(70, "token cap of one sentence")
    stop: Literal["released", "sentence_marks"] = opt(
        "released", "where a sentence ends: at the '.' token (released) or at any of sentence_end or EOS")
    period_id: int | None = opt(None, "released stop: the '.' token id (null = the vocabulary's '.')")
    sentence_end: list[str] = opt(help="sentence_marks stop: the marks that end a sentence",
                                  factory=lambda: [".", "!", "?"])
    max_chars: int | None = opt(1024, "a branch is final once prompt + response reach this many characters")
    max_response_tokens: int | None = opt(None, "a branch is final once its response has this many tokens")
    max_depth: int | None = opt(None, "a branch is final after this many sentences (null = no cap)")
    keep_top: int | None = opt(None, "partial responses kept per depth, best by LM score (null = released rule)")
    keep_bottom: int | None = opt(None, "partial responses kept per depth, worst by LM score (null = released rule)")
    prune_threshold: int | None = opt(None, "prune only with at least this many live children (null = num_beams)")
    min_sentence_chars: int = opt(4, "shorter new sentences are dropped with their subtree")
    dedupe_siblings: bool = opt(False, "drop exact-duplicate sibling sentences (released: kept)")
    junk_filter: Literal["after_pruning", "before_pruning"] = opt(
        "after_pruning", "when junk and too-short sentences are dropped (released: after pruning)")
    junk_rules: Literal["released", "broad"] = opt(
        "released", "what junk is: the released rules on the cut, whitelisted text, or ours (broad) on the sentence")
    suppress_special_tokens: bool = opt(
        False, "ban pad and BOS in the search too (released: only the image placeholder, which cannot be fed back)")
    batch_nodes: int | None = opt(None, "cap on the nodes searching at once (null = kv_budget alone; 1 = one at a time)")
    prompt_batch: int | None = opt(None, "cap on the prompts resident (null = kv_budget alone)")
    engine: Literal["pool", "reference", "vllm"] = opt(
        "pool", "pool = continuously refilled rows with prefix reuse (same trees); reference = level lockstep; "
        "vllm = either expander on a vLLM worker (docs/engines.md)")
    kv_budget: int | str = opt("auto", "HF engines: cached tokens the search may hold, or auto (half the free CUDA memory; 8 GiB on CPU)")
    seed: int = opt(0, "search seed")
    image_aspect: Literal["crop", "pad"] | None = opt(
        None, "image preparation of generation and LM scoring (null = inputs.image_aspect)")

    def __post_init__(self) -> None:
        w = "tree"
        _check(self.expander in EXPANDERS, f"{w}.expander", f"{self.expander!r} is not one of {EXPANDERS}")
        _check(self.stop in STOP_RULES, f"{w}.stop", f"{self.stop!r} is not one of {STOP_RULES}")
        _check(self.junk_filter in JUNK_FILTERS, f"{w}.junk_filter", f"{self.junk_filter!r} is not one of {JUNK_FILTERS}")
        _check(self.junk_rules in JUNK_RULES, f"{w}.junk_rules", f"{self.junk_rules!r} is not one of {JUNK_RULES}")
        _check(self.num_beams >= 1, f"{w}.num_beams", "must be >= 1")
        _check(self.num_beam_groups >= 1 and self.num_beams % self.num_beam_groups == 0,
               f"{w}.num_beam_groups", f"must divide num_beams ({self.num_beams})")
        _check(self.diversity_penalty >= 0, f"{w}.diversity_penalty", "must be >= 0")
        _check(self.num_samples >= 1, f"{w}.num_samples", "must be >= 1")
        _check(self.temperature > 0, f"{w}.temperature", "must be > 0")
        _check(0 < self.top_p <= 1, f"{w}.top_p", "must be in (0, 1]")
        _check(self.max_new_tokens >= 1, f"{w}.max_new_tokens", "must be >= 1")
        caps = ("max_chars", "max_response_tokens", "max_depth")
        for name in caps:
            v = getattr(self, name)
            _check(v is None or v >= 1, f"{w}.{name}", "must be >= 1 or null")
        _check(any(getattr(self, n) is not None for n in caps), f"{w}.max_chars",
               "at least one of max_chars, max_response_tokens, max_depth must be set (else a tree may never end)")
        _check(self.period_id is None or self.period_id >= 0, f"{w}.period_id", "must be a token id or null")
        for name in ("batch_nodes", "prompt_batch"):
            v = getattr(self, name)
            _check(v is None or v >= 1, f"{w}.{name}", "must be >= 1 or null")
        _check(self.image_aspect in (None, "crop", "pad"), f"{w}.image_aspect", "must be crop, pad or null")
        _check(self.engine in ENGINES, f"{w}.engine", f"{self.engine!r} is not one of {ENGINES}")
        _check(self.kv_budget == "auto" or (isinstance(self.kv_budget, int) and not isinstance(self.kv_budget, bool)
                                            and self.kv_budget >= 1), f"{w}.kv_budget", "must be a token count >= 1 or 'auto'")
        for name in ("keep_top", "keep_bottom", "prune_threshold"):
            v = getattr(self, name)
            _check(v is None or v >= 0, f"{w}.{name}", "must be >= 0 or null")

    def unread(self) -> list[tuple[str, str, Any, Any]]:
        """Fields another expander, stop rule or engine reads (seed: only sampling draws; training/csr/search.py)."""
        return (_other(self, "expander", {"group_beam": ("num_beams", "num_beam_groups", "diversity_penalty",
                                                         "length_penalty"),
                                          "sample": ("num_samples", "temperature", "top_p", "seed")})
                + _other(self, "stop", {"released": ("period_id",), "sentence_marks": ("sentence_end",)})
                # vLLM bounds its own cache; the reference path (the sampling expander on the pool too) reads
                # the budget only where a cap is null (training/csr/engines.py)
                + ([("kv_budget", "engine", "vllm", "pool")] if self.engine == "vllm" else [])
                + ([("kv_budget", "batch_nodes", self.batch_nodes, None)]
                   if (self.engine == "reference" or self.expander == "sample") and self.engine != "vllm"
                   and self.batch_nodes is not None and self.prompt_batch is not None else []))

    @property
    def width(self) -> int:
        """Candidate sentences per expansion: beams, or samples for the sampling expander."""
        return self.num_beams if self.expander == "group_beam" else self.num_samples

    def pruning(self) -> tuple[int, int, int]:
        """(keep_top, keep_bottom, threshold) with the released code's defaults filled in."""
        k = self.width
        top = self.keep_top if self.keep_top is not None else max(k // 2 - 1, 0)
        bottom = self.keep_bottom if self.keep_bottom is not None else k // 2
        threshold = self.prune_threshold if self.prune_threshold is not None else k
        return top, bottom, threshold


@dataclass
class RewardConfig:
    """Calibrated reward (docs/csr-method.md §3): `rank` = released code (sibling ranks, lower cost is better),
    `value` = paper formula (lam * R_I + (1 - lam) * R_T summed over sentences, higher is better).
    lam is the paper's lambda (the code's clip_alpha): the weight of the visual term.

    language_score: the sentence's language score R_T.
      `beam` (released): the search's own score kept on the node (for group beam search HF's
        `sequences_scores`: mean token log-prob including the diversity-penalty deductions).
      `teacher_forced` (ours): the mean token log-prob of the same ids from a second, penalty-free
        forward pass over every node (`lm_batch` rows per pass).
    clip_text: the text CLIP scores for a sentence.
      `released`: the released score.py's: the node's decoded text (prompt included) cut at
        len(parent's text) + 3 characters, stripped, then passed through its character whitelist
        (`training.csr.clean.released_new_text`); the root's text is the prompt string.
      `sentence` (ours): the node's own decoded sentence.
    """

    mode: Literal["rank", "value"] = opt("rank", "rank = released code (sibling ranks), value = paper formula")
    lam: float = opt(0.9, "weight of the visual (CLIP) term, the paper's lambda")
    language_score: Literal["beam", "teacher_forced"] = opt(
        "beam", "the sentence's language score: the search's own (released) or a penalty-free forward pass")
    clip_text: Literal["released", "sentence"] = opt(
        "released", "what CLIP scores: the released cut text (len(parent)+3, whitelist) or the sentence")
    lm_batch: int = opt(32, "teacher_forced: rows per scoring forward pass")
    clip_batch: int = opt(64, "CLIP scoring batch")

    def __post_init__(self) -> None:
        _check(self.mode in REWARD_MODES, "reward.mode", f"{self.mode!r} is not one of {REWARD_MODES}")
        _check(0.0 <= self.lam <= 1.0, "reward.lam", "must be in [0, 1]")
        _check(self.language_score in LANGUAGE_SCORES, "reward.language_score",
               f"{self.language_score!r} is not one of {LANGUAGE_SCORES}")
        _check(self.clip_text in CLIP_TEXTS, "reward.clip_text", f"{self.clip_text!r} is not one of {CLIP_TEXTS}")
        _check(self.lm_batch >= 1 and self.clip_batch >= 1, "reward.lm_batch", "batch sizes must be >= 1")

    def unread(self) -> list[tuple[str, str, Any, Any]]:
        return _other(self, "language_score", {"teacher_forced": ("lm_batch",)})


@dataclass
class PairConfig:
    """One pair per prompt (the best and the worst complete response) and what DPO sees of it.

    template: the human turn of the pair file.
      `released`: the whole templated prompt the candidates were generated from (construct.py stores it,
        and its DPO wraps it in the conversation template again: system prompt twice, "ASSISTANT:
        ASSISTANT:"); the record carries "template": "released" so the `csr_pairs` reader takes it as is.
      `single` (ours): "<image>\n{question}", templated once by DPO.
    post_eos: `keep` (released: a response is the decoded leaf with what the search generated after an
      EOS, up to its "."), `cut` (ours: the response ends before its first EOS).
    guards: False (released): every complete path counts, duplicates included; one path gives chosen ==
      rejected; a prompt without a complete path (the released construct.py crashes there) is skipped
      and counted as "no_paths". True (ours): one path per distinct response, a prompt with fewer than
      `min_paths` of them is skipped, so is a pair whose two sides decode the same or whose reward gap is
      below `min_gap` (None = no gap filter). min_paths / min_gap need guards: true.
    tie_order: the order complete paths are listed in, which breaks ties (chosen = the first best,
      rejected = the last worst) and, with guards, picks the path kept for a repeated response.
      `released`: depth first, children in the order the search returned them (construct.py's `dfs`),
      stable-sorted by the released key (rank mode: the mean cost, ascending). `node_id` (ours, the
      demo's): by leaf node id (the breadth-first order nodes are created in), sorted by reward."""

    template: Literal["released", "single"] = opt(
        "released", "the pair file's human turn: the templated prompt (released) or <image>+question (single)")
    post_eos: Literal["keep", "cut"] = opt("keep", "text generated after EOS: kept (released) or cut")
    guards: bool = opt(False, "dedupe paths, need min_paths distinct responses, drop equal sides / small gaps")
    min_paths: int = opt(2, "guards: prompts with fewer distinct complete responses are skipped")
    min_gap: float | None = opt(None, "guards: pairs whose reward gap is below this are skipped (null = no filter)")
    tie_order: Literal["released", "node_id"] = opt(
        "released", "path order that breaks reward ties: depth first as construct.py (released) or by leaf node id")

    def __post_init__(self) -> None:
        _check(self.template in PAIR_TEMPLATES, "pairs.template", f"{self.template!r} is not one of {PAIR_TEMPLATES}")
        _check(self.post_eos in POST_EOS, "pairs.post_eos", f"{self.post_eos!r} is not one of {POST_EOS}")
        _check(self.tie_order in TIE_ORDERS, "pairs.tie_order", f"{self.tie_order!r} is not one of {TIE_ORDERS}")
        _check(isinstance(self.guards, bool), "pairs.guards", "must be true or false")
        _check(self.min_paths >= 2, "pairs.min_paths", "must be >= 2 (chosen and rejected must differ)")
        _check(self.min_gap is None or self.min_gap >= 0, "pairs.min_gap", "must be >= 0 or null")

    def unread(self) -> list[tuple[str, str, Any, Any]]:
        return _other(self, "guards", {True: ("min_paths", "min_gap")})


@dataclass
class CSRConfig:
    """The loop. Paths are resolved relative to the current directory by the caller (training/train.py).

    name / output_dir: run name; iterations land in `output_dir/iter_t/` (default runs/NAME).
    model: the base checkpoint (iteration 0). prompts: json/jsonl of {id, image, question}.
    image_root: images are `image_root/image`. clip: the CLIP directory used as visual judge.
    iterations: T. limit: use only the first N prompts (None = all).
    train: mapping handed to `training.trainers.dpo.run_dpo` on top of what the loop sets
      (model, data, output dir); e.g. lora_r, lora_alpha, learning_rate, beta, num_train_epochs.
    eval: the coupled evaluation of the base and every merged checkpoint through `evalsuite.run.run_eval`:
      an `evalsuite.run_config.EvalConfig` section (tasks, data_root, limit, chair:, lmms:, ...; see
      configs/eval/), validated when the preset loads; null = no evaluation. The loop sets its ckpt,
      output, label and store (results and pair statistics, as task `csr_pairs`, go to `store`).
    device / dtype: where generation and scoring run (None = cuda if available, else cpu).
    inputs: the prompt and image settings (`evalsuite.models.inputs.InputConfig`: system_prompt,
      chat_template, image_aspect) used identically by candidate generation, reward scoring, DPO collation
      and the coupled evaluation, handed to each as the object (configs/csr.yaml sets the released code's),
      except that `tree.image_aspect` and `train.image_aspect`, when set, replace `inputs.image_aspect` for
      generation (and LM scoring) and for DPO: the released sampler centre-crops, its DPO pads.
    """

    method: Literal["csr"] = opt("csr", "the CSR loop")
    name: str = opt("csr", "run name (default output_dir runs/NAME)")
    model: str = opt("", "the base checkpoint directory (iteration 0)", path="dir")
    prompts: str = opt("", "json/jsonl of {id, image, question}", path="file")
    image_root: str = opt("", "images are image_root/image", path="dir")
    clip: str = opt("", "the CLIP directory used as visual judge", path="dir")
    iterations: int = opt(3, "iterations T")
    output_dir: str | None = opt(None, "iterations land in output_dir/iter_t/ (null = runs/NAME)")
    limit: int | None = opt(None, "use only the first N prompts (null = all)")
    store: str = opt("results", "results store (evaluations and pair statistics)")
    eval: EvalConfig | None = opt(None, "the coupled evaluation of the base and every merged checkpoint "
                                        "(an evalsuite run config; null = none)")
    device: str | None = opt(None, "cpu | cuda | cuda:N | mps for generation and scoring (null = cuda if available)")
    dtype: Literal["float32", "float16", "bfloat16"] | None = opt(
        None, "dtype of generation and scoring (null = bfloat16 on cuda, else float32)")
    inputs: InputConfig = opt(help="prompt and image settings of generation, scoring, DPO and evaluation "
                                   "(tree.image_aspect / train.image_aspect replace image_aspect for one stage)",
                              factory=InputConfig)
    tree: TreeConfig = opt(help="sentence-level search", factory=TreeConfig)
    reward: RewardConfig = opt(help="calibrated reward", factory=RewardConfig)
    pairs: PairConfig = opt(help="preference pair selection", factory=PairConfig)
    train: dict[str, Any] = opt(help="DPO settings on top of what the loop sets (lora_r, learning_rate, beta, ...)",
                                factory=dict)

    MOVED = MOVED_TO_INPUTS  # top-level system_prompt: ... in a preset: one line naming inputs.system_prompt
    # eval.system_prompt: ... names the top-level inputs.system_prompt, not eval.inputs (the loop sets that)
    MOVED_UP = ("eval",)

    def __post_init__(self) -> None:
        for name in ("model", "prompts", "image_root", "clip"):
            _check(bool(getattr(self, name)), f"csr.{name}", "is required")
        _check(self.iterations >= 1, "csr.iterations", "must be >= 1")
        _check(self.limit is None or self.limit >= 1, "csr.limit", "must be >= 1 or null")
        if self.eval is not None:
            defaults = EvalConfig()
            for name in ("ckpt", "output", "label", "store"):
                _check(getattr(self.eval, name) == getattr(defaults, name), f"eval.{name}",
                       "is set by the loop (the checkpoint of each iteration, its eval dir, the top-level store)")
            _check(self.eval.inputs == defaults.inputs, "eval.inputs",
                   "is set by the loop from the top-level inputs (generation, DPO and evaluation share it)")
        # fail now, not at the train stage; kept for `unread`
        self._train_checked = self.train_config(self.model, 1, self.run_dir / "iter_1", portable=True)

    def unread(self) -> list[tuple[str, str, Any, Any]]:
        """The `train:` mapping's fields that its settings never read (its typed sections list their own), and
        the `eval:` option sections no task of `eval.tasks` reads (`evalsuite run` refuses those itself,
        evalsuite/run_config.py `_check_unused`; the loop's evaluation is built without passing there)."""
        import dataclasses

        from evalsuite.config import unread_fields
        from evalsuite.run_config import OWN_SECTIONS

        out = [(f, s, now, None if s in OWNED_SWITCHES else need)
               for f, s, now, need in unread_fields(self._train_checked, "train.")]
        if self.eval is not None:
            idle = sorted({"gen", "lmms", *OWN_SECTIONS} - self.eval.used_sections())
            out += [(f"eval.{s}.{f.name}", "eval.tasks", ",".join(self.eval.tasks) or "[]", None)
                    for s in idle for f in dataclasses.fields(getattr(self.eval, s))]
        return out

    def input_config(self) -> InputConfig:
        """The top-level `inputs` (the coupled evaluation's; reward scoring's and DPO's but for image_aspect)."""
        return self.inputs

    def generation_input_config(self) -> InputConfig:
        """The inputs candidates are generated and LM-scored from (`tree.image_aspect` over `inputs.image_aspect`)."""
        import dataclasses

        return dataclasses.replace(self.inputs, image_aspect=self.tree.image_aspect or self.inputs.image_aspect)

    def check_ready(self) -> None:
        """Before the loop starts: the inputs exist and the train section fits this machine."""
        from evalsuite.config import missing_paths

        missing = missing_paths(self)
        if missing:
            raise UserError(missing[0])
        if not (Path(self.model) / "config.json").is_file():
            raise UserError(f"model: no config.json in {self.model} (not a Hugging Face checkpoint directory)")
        self.train_config(self.model, 1, self.run_dir / "iter_1").check_training_arguments("csr.train")

    @property
    def evaluates(self) -> bool:
        return self.eval is not None and bool(self.eval.tasks)

    def eval_config(self, ckpt: str | Path, label: str, out: Path) -> EvalConfig:
        """The `eval:` section completed with what the loop owns, for one checkpoint."""
        import dataclasses

        return dataclasses.replace(self.eval, ckpt=str(ckpt), output=str(out), label=label, store=self.store,
                                   device=self.eval.device or self.device, inputs=self.inputs)

    def train_config(self, ckpt: str | Path, t: int, d: Path, portable: bool = False):
        """The trainer's TrainConfig for iteration t: the preset's `train:` mapping + what the loop owns.

        portable: check values without this machine's devices (QLoRA/flash-attention on a CPU-only machine
        are only warned about when the preset is loaded; `check_ready` checks for real, TrainingArguments
        included)."""
        import dataclasses

        from training.config import build_train_config

        # the prompt DPO trains on is the one the candidates were generated from; its images are prepared as
        # `train.image_aspect` says when set (the released DPO pads what its sampler centre-cropped), else as
        # `inputs.image_aspect`. `train.image_aspect` keeps its spelling: it is part of the csr_train results'
        # identity (training/csr/train_log.py), which must not change for the same settings.
        aspect = self.train.get("image_aspect", self.inputs.image_aspect)
        _check(aspect in IMAGE_ASPECTS, "train.image_aspect", f"{aspect!r} is not one of {', '.join(IMAGE_ASPECTS)}")
        owned = {"method": "csr", "model_name_or_path": str(ckpt), "output_dir": str(d / "train"),
                 "merged_dir": str(d / "merged"), "data_path": str(d / "pairs.json"), "dataset_name": "csr_pairs",
                 "image_root": str(self.image_root), "iteration": t, "parent": str(ckpt), "save_merged": True,
                 "inputs": self.inputs if aspect == self.inputs.image_aspect
                 else dataclasses.replace(self.inputs, image_aspect=aspect)}
        train = {k: v for k, v in self.train.items() if k != "image_aspect"}
        if train.get("use_lora") and "lora_merge" not in train and train.get("lora_scope") != "language_model":
            # CSR's merge (LLaVA's) loads the vision tower afresh: LoRA outside the language model is lost. A
            # CSR run merges so unless its preset says otherwise (VL-RLHF's `all` is the TrainConfig default;
            # under lora_scope language_model there is no LoRA outside it and the two merges are one).
            train["lora_merge"] = "language_model"
        clash = sorted((set(owned) | {"system_prompt", "chat_template"}) & set(train))
        if clash:
            raise UserError(f"train: {', '.join(clash)} are set by the loop, remove them from the preset")
        return build_train_config({**train, **owned}, "csr.train", portable=portable, report=False)  # unread

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) if self.output_dir else Path("runs") / self.name

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "config", report: bool = True) -> "CSRConfig":
        from evalsuite.config import build

        return build(cls, data, where, report=report)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_config(path: str | Path, overrides: list | None = None) -> CSRConfig:
    """A CSR preset with `key=value` / `section.key=value` / `--key value` overrides (evalsuite/config.py)."""
    from evalsuite.config import load

    return load(CSRConfig, path, overrides)
