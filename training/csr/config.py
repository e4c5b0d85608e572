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

from evalsuite.config import check_fields, opt
from evalsuite.engines.vllm_process import VllmOptions
from evalsuite.errors import UserError
from evalsuite.gen_settings import GroupBeamSettings, own_defaults
from evalsuite.models.inputs import IMAGE_ASPECTS, MOVED_TO_INPUTS, InputConfig
from evalsuite.run_config import EvalConfig


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


@dataclass(frozen=True)
@own_defaults(notes={"num_beams": "group_beam: {}; the children of a node", "num_beam_groups": "group_beam: {}",
                     "diversity_penalty": "group_beam: {}", "length_penalty": "group_beam: {}",
                     "temperature": "sample: {}", "top_p": "sample: {}"})
class TreeConfig(GroupBeamSettings):
    """Sentence-level search (docs/csr-method.md §2, §10.1.2). Defaults are the released code's; every
    switch naming our change, and what the released code does there, is in docs/csr-fidelity.md; the
    engines (pool, reference, vllm: the same trees) in docs/csr-engine.md. A field only another expander,
    stop rule or engine reads is refused on the command line and warned about from a preset (`unread`).
    The generation settings (max_new_tokens, beams, groups, penalties, temperature, top_p) are declared in
    evalsuite/gen_settings.py; this class adds which expander reads each to their help."""

    expander: Literal["group_beam", "sample"] = opt(
        "group_beam", "how a node's next sentences are drawn: diverse group beam search (the paper's) or sampling")
    num_samples: int = opt(5, "sample: draws (children per node)", ge=1)
    stop: Literal["released", "sentence_marks"] = opt(
        "released", "where a sentence ends: at the '.' token (released: EOS does not stop, the branch runs on to "
        "its '.' and is final) or at any of sentence_end or EOS")
    period_id: int | None = opt(None, "released stop: the '.' token id (null = the vocabulary's '.')", ge=0)
    sentence_end: list[str] = opt(help="sentence_marks stop: the marks that end a sentence",
                                  factory=lambda: [".", "!", "?"])
    max_chars: int | None = opt(1024, "a branch is final once the decoded prompt + response (special tokens kept) "
                                      "reach this many characters", ge=1)
    max_response_tokens: int | None = opt(None, "a branch is final once its response has this many tokens", ge=1)
    max_depth: int | None = opt(None, "a branch is final after this many sentences (null = no cap; at least one "
                                      "of max_chars, max_response_tokens, max_depth is set)", ge=1)
    keep_top: int | None = opt(None, "partial responses kept per depth, best by cumulative LM score "
                                     "(null = released: floor(k/2)-1, k = num_beams)", ge=0)
    keep_bottom: int | None = opt(None, "partial responses kept per depth, worst by cumulative LM score "
                                        "(null = released: floor(k/2))", ge=0)
    prune_threshold: int | None = opt(None, "prune only with at least this many live children (null = num_beams)",
                                      ge=0)
    min_sentence_chars: int = opt(4, "shorter new sentences are dropped with their subtree")
    dedupe_siblings: bool = opt(False, "drop exact-duplicate sibling sentences (released: kept)")
    junk_filter: Literal["after_pruning", "before_pruning"] = opt(
        "after_pruning", "when junk and too-short sentences are dropped (released: after pruning)")
    junk_rules: Literal["released", "broad"] = opt(
        "released", "what junk is: the released rules on the cut, whitelisted text, or ours (broad) on the sentence")
    suppress_special_tokens: bool = opt(
        False, "ban pad and BOS in the search too (released: only the image placeholder, which cannot be fed back)")
    batch_nodes: int | None = opt(None, "cap on the nodes searching at once (null = kv_budget alone; 1 = one at a time)",
                                  identity=False)
    prompt_batch: int | None = opt(None, "cap on the prompts resident (null = kv_budget alone)", identity=False)
    engine: Literal["pool", "reference", "vllm"] = opt(
        "pool", "pool = continuously refilled rows with prefix reuse (same trees); reference = level lockstep; "
        "vllm = either expander on a vLLM worker (docs/engines.md)", identity=False)  # tree_identity: vllm counts
    kv_budget: int | str = opt("auto", "HF engines: cached tokens the search may hold, or auto (half the free CUDA "
                                       "memory; 8 GiB on CPU)", identity=False)
    share_prefix: bool = opt(True, "pool: a node's beams share one cached copy of its context (attention over it "
                                   "plus each beam's own tokens; same trees up to float rounding); false = each "
                                   "beam row holds its own copy", identity=False)
    seed: int = opt(0, "search seed")
    image_aspect: Literal["crop", "pad"] | None = opt(
        None, "image preparation of generation and LM scoring: crop (the released sampler's), pad, or null = "
              "inputs.image_aspect")

    SECTION = "tree"

    def __post_init__(self) -> None:
        super().__post_init__()   # declared choices and ranges; num_beam_groups divides num_beams
        w = self.SECTION
        _check(any(getattr(self, n) is not None for n in ("max_chars", "max_response_tokens", "max_depth")),
               f"{w}.max_chars",
               "at least one of max_chars, max_response_tokens, max_depth must be set (else a tree may never end)")
        for name in ("batch_nodes", "prompt_batch"):
            v = getattr(self, name)
            _check(v is None or v >= 1, f"{w}.{name}", "must be >= 1 or null")
        _check(self.kv_budget == "auto" or (isinstance(self.kv_budget, int) and not isinstance(self.kv_budget, bool)
                                            and self.kv_budget >= 1), f"{w}.kv_budget", "must be a token count >= 1 or 'auto'")

    def unread(self) -> list[tuple[str, str, Any, Any]]:
        """Fields another expander, stop rule or engine reads (seed: only sampling draws; training/csr/search.py)."""
        return (_other(self, "expander", {"group_beam": ("num_beams", "num_beam_groups", "diversity_penalty",
                                                         "length_penalty"),
                                          "sample": ("num_samples", "temperature", "top_p", "seed")})
                + _other(self, "stop", {"released": ("period_id",), "sentence_marks": ("sentence_end",)})
                # vLLM bounds its own cache; the reference path (the sampling expander on the pool too) reads
                # the budget only where a cap is null (training/csr/engines.py)
                + ([("kv_budget", "engine", "vllm", "pool")] if self.engine == "vllm" else [])
                # the pool's layout; the sampling expander runs the reference path
                + ([("share_prefix", "engine", self.engine, "pool")] if self.engine != "pool"
                   else [("share_prefix", "expander", "sample", "group_beam")] if self.expander == "sample" else [])
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
    """Calibrated reward (docs/csr-method.md §3; released vs ours: docs/csr-fidelity.md)."""

    mode: Literal["rank", "value"] = opt(
        "rank", "rank = released code (sibling ranks, lower cost is better), value = paper formula "
                "(lam * R_I + (1 - lam) * R_T summed over sentences)")
    lam: float = opt(0.9, "weight of the visual (CLIP) term, the paper's lambda (the code's clip_alpha)", ge=0, le=1)
    language_score: Literal["beam", "teacher_forced"] = opt(
        "beam", "the sentence's language score: the search's own, diversity penalty included (released), or the "
                "mean token log-prob of a penalty-free forward pass")
    clip_text: Literal["released", "sentence"] = opt(
        "released", "what CLIP scores: the released cut text (len(parent)+3, whitelist) or the sentence")
    lm_batch: int = opt(32, "teacher_forced: rows per scoring forward pass", ge=1, identity=False)
    clip_batch: int = opt(64, "CLIP scoring batch", ge=1, identity=False)

    def __post_init__(self) -> None:
        check_fields(self, "reward")

    def unread(self) -> list[tuple[str, str, Any, Any]]:
        return _other(self, "language_score", {"teacher_forced": ("lm_batch",)})


@dataclass
class PairConfig:
    """One pair per prompt (the best and the worst complete response) and what DPO sees of it
    (docs/csr-method.md §3.2; released vs ours: docs/csr-fidelity.md)."""

    template: Literal["released", "single"] = opt(
        "released", "the pair file's human turn: the templated prompt (released) or <image>+question (single)")
    post_eos: Literal["keep", "cut"] = opt("keep", "text generated after EOS: kept (released) or cut")
    guards: bool = opt(False, "dedupe paths, need min_paths distinct responses, drop equal sides / small gaps")
    min_paths: int = opt(2, "guards: prompts with fewer distinct complete responses are skipped", ge=2)
    min_gap: float | None = opt(None, "guards: pairs whose reward gap is below this are skipped (null = no filter)",
                                ge=0)
    tie_order: Literal["released", "node_id"] = opt(
        "released", "path order that breaks reward ties: depth first as construct.py (released) or by leaf node id")

    def __post_init__(self) -> None:
        check_fields(self, "pairs")
        _check(isinstance(self.guards, bool), "pairs.guards", "must be true or false")

    def unread(self) -> list[tuple[str, str, Any, Any]]:
        return _other(self, "guards", {True: ("min_paths", "min_gap")})


@dataclass
class CSRConfig:
    """The loop (docs/csr-method.md §6). Paths are resolved relative to the current directory by the caller
    (training/train.py). `inputs` is handed as one object to candidate generation, reward scoring, DPO
    collation and the coupled evaluation; `tree.image_aspect` / `train.image_aspect` replace its
    image_aspect for one stage (the released sampler centre-crops, its DPO pads)."""

    method: Literal["csr"] = opt("csr", "the CSR loop")
    name: str = opt("csr", "run name (default output_dir runs/NAME)")
    model: str = opt("", "the base checkpoint directory (iteration 0)", path="dir")
    prompts: str = opt("", "json/jsonl of {id, image, question}", path="file")
    image_root: str = opt("", "images are image_root/image", path="dir")
    clip: str = opt("", "the CLIP directory used as visual judge", path="dir")
    iterations: int = opt(3, "iterations T", ge=1)
    output_dir: str | None = opt(None, "iterations land in output_dir/iter_t/ (null = runs/NAME)")
    limit: int | None = opt(None, "use only the first N prompts (null = all)", ge=1)
    store: str = opt("results", "results store (evaluations and pair statistics)")
    eval: EvalConfig | None = opt(None, "the coupled evaluation of the base and every merged checkpoint "
                                        "(an evalsuite run config: tasks, data_root, limit, chair:, lmms:, ...; "
                                        "the loop sets ckpt, output, label, store; null = none)")
    device: str | None = opt(None, "cpu | cuda | cuda:N | mps for generation and scoring (null = cuda if available)")
    dtype: Literal["float32", "float16", "bfloat16"] | None = opt(
        None, "dtype of generation and scoring (null = bfloat16 on cuda, else float32)")
    inputs: InputConfig = opt(help="prompt and image settings of generation, scoring, DPO and evaluation "
                                   "(tree.image_aspect / train.image_aspect replace image_aspect for one stage)",
                              factory=InputConfig)
    tree: TreeConfig = opt(help="sentence-level search", factory=TreeConfig)
    reward: RewardConfig = opt(help="calibrated reward", factory=RewardConfig)
    pairs: PairConfig = opt(help="preference pair selection", factory=PairConfig)
    train: dict[str, Any] = opt(help="DPO settings (training.config.TrainConfig fields, checked when the preset "
                                     "loads) on top of what the loop sets (model, data, output dir)",
                                factory=dict)
    vllm: VllmOptions = opt(help="the vLLM worker of tree generation (read only with tree.engine: vllm; the "
                                 "eval config's section: docs/engines.md)", factory=VllmOptions)

    MOVED = MOVED_TO_INPUTS  # top-level system_prompt: ... in a preset: one line naming inputs.system_prompt
    # eval.system_prompt: ... names the top-level inputs.system_prompt, not eval.inputs (the loop sets that)
    MOVED_UP = ("eval",)

    def __post_init__(self) -> None:
        for name in ("model", "prompts", "image_root", "clip"):
            _check(bool(getattr(self, name)), f"csr.{name}", "is required")
        check_fields(self, "csr")
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
        from evalsuite.tasks.registry import options_classes

        out = [(f, s, now, None if s in OWNED_SWITCHES else need)
               for f, s, now, need in unread_fields(self._train_checked, "train.")]
        if self.tree.engine != "vllm":
            out += [(f"vllm.{f.name}", "tree.engine", self.tree.engine, "vllm") for f in dataclasses.fields(VllmOptions)]
        if self.eval is not None:
            idle = sorted({"gen", "lmms", "judge", *options_classes()} - self.eval.used_sections())
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
        """Before the loop starts: the inputs exist, the evaluated tasks' required options are given and the
        train section fits this machine."""
        from evalsuite.config import missing_paths

        missing = missing_paths(self)
        if missing:
            raise UserError(missing[0])
        if not (Path(self.model) / "config.json").is_file():
            raise UserError(f"model: no config.json in {self.model} (not a Hugging Face checkpoint directory)")
        if self.evaluates:  # an evaluated task's required option: now, not at the first evaluation
            from evalsuite.run import own_tasks_of_run, split_tasks

            own_tasks_of_run(self.eval, split_tasks(self.eval.tasks)[0], within="eval")
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
