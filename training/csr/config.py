"""Typed configuration of the CSR loop (csr-method.md; every default is the released code's unless noted).

Four pieces, each validated on construction so a bad preset fails before any model loads:

* `TreeConfig`   sentence-level search tree (§2): expander, beams/groups/penalty, pruning, caps.
* `RewardConfig` how sentence rewards combine into a path score (§3): mode `rank` | `value`, lambda.
* `PairConfig`   pair selection guards (§3.2(g), §10.1.4): minimum distinct paths, optional min gap.
* `CSRConfig`    the iteration driver (§6): data, models, T, output dir, training and evaluation knobs.

`CSRConfig.from_dict(yaml_dict)` accepts nested `tree:`, `reward:`, `pairs:` sections and a free
`train:` mapping that is passed to the trainer (`training.trainers.dpo.run_dpo`) unchanged, so this
file never duplicates the trainer's own argument dataclasses.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from evalsuite.errors import UserError

EXPANDERS = ("group_beam", "sample")
REWARD_MODES = ("rank", "value")


def _check(cond: bool, where: str, msg: str) -> None:
    if not cond:
        raise UserError(f"{where}: {msg}")


@dataclass
class TreeConfig:
    """Sentence-level search (csr-method.md §2, §10.1.2).

    expander: `group_beam` (diverse group beam search, the paper's) or `sample` (num_samples draws).
    num_beams / num_beam_groups / diversity_penalty: 5 / 5 / 3.0 = one beam per group, Hamming penalty.
    max_new_tokens: token cap of one sentence (70). A sentence also ends at a `sentence_end` token or EOS.
    keep_top / keep_bottom: partial responses kept per depth, best and worst by cumulative LM score;
      None = the released code's floor(k/2)-1 and floor(k/2) with k = num_beams (1 and 2).
    prune_threshold: prune only when at least this many live children exist (None = num_beams).
    max_response_tokens / max_depth: a branch becomes final at these caps (the original capped at
      1024 characters including the prompt; token counts are used here since ids are tracked).
    min_sentence_chars: shorter new sentences are dropped with their subtree (§3.2(b)).
    batch_nodes: nodes expanded in one batched forward (rows = nodes x beams); 1 = one-at-a-time.
    prompt_batch: prompts whose trees grow together (bounds memory and sets the unit of progress).
    """

    expander: str = "group_beam"
    num_beams: int = 5
    num_beam_groups: int = 5
    diversity_penalty: float = 3.0
    length_penalty: float = 1.0
    num_samples: int = 5
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 70
    sentence_end: list[str] = field(default_factory=lambda: [".", "!", "?"])
    keep_top: int | None = None
    keep_bottom: int | None = None
    prune_threshold: int | None = None
    max_response_tokens: int = 256
    max_depth: int = 12
    min_sentence_chars: int = 4
    dedupe_siblings: bool = True
    batch_nodes: int = 32
    prompt_batch: int = 16
    seed: int = 0

    def __post_init__(self) -> None:
        w = "tree"
        _check(self.expander in EXPANDERS, f"{w}.expander", f"{self.expander!r} is not one of {EXPANDERS}")
        _check(self.num_beams >= 1, f"{w}.num_beams", "must be >= 1")
        _check(self.num_beam_groups >= 1 and self.num_beams % self.num_beam_groups == 0,
               f"{w}.num_beam_groups", f"must divide num_beams ({self.num_beams})")
        _check(self.diversity_penalty >= 0, f"{w}.diversity_penalty", "must be >= 0")
        _check(self.num_samples >= 1, f"{w}.num_samples", "must be >= 1")
        _check(self.temperature > 0, f"{w}.temperature", "must be > 0")
        _check(0 < self.top_p <= 1, f"{w}.top_p", "must be in (0, 1]")
        _check(self.max_new_tokens >= 1, f"{w}.max_new_tokens", "must be >= 1")
        _check(self.max_response_tokens >= 1 and self.max_depth >= 1, f"{w}.max_depth", "caps must be >= 1")
        _check(self.batch_nodes >= 1 and self.prompt_batch >= 1, f"{w}.batch_nodes", "must be >= 1")
        for name in ("keep_top", "keep_bottom", "prune_threshold"):
            v = getattr(self, name)
            _check(v is None or v >= 0, f"{w}.{name}", "must be >= 0 or null")

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
    """Calibrated reward (§3): `rank` = released code (sibling ranks, lower cost is better),
    `value` = paper formula (lam * R_I + (1 - lam) * R_T summed over sentences, higher is better).
    lam is the paper's lambda (the code's clip_alpha): the weight of the visual term."""

    mode: str = "rank"
    lam: float = 0.9
    lm_batch: int = 32
    clip_batch: int = 64

    def __post_init__(self) -> None:
        _check(self.mode in REWARD_MODES, "reward.mode", f"{self.mode!r} is not one of {REWARD_MODES}")
        _check(0.0 <= self.lam <= 1.0, "reward.lam", "must be in [0, 1]")


@dataclass
class PairConfig:
    """One pair per prompt; prompts with fewer than `min_paths` distinct complete responses are skipped,
    and so are pairs whose reward gap is below `min_gap` (None = no gap filter, as released)."""

    min_paths: int = 2
    min_gap: float | None = None

    def __post_init__(self) -> None:
        _check(self.min_paths >= 2, "pairs.min_paths", "must be >= 2 (chosen and rejected must differ)")
        _check(self.min_gap is None or self.min_gap >= 0, "pairs.min_gap", "must be >= 0 or null")


@dataclass
class CSRConfig:
    """The loop. Paths are resolved relative to the current directory by the caller (loop.main).

    name / output_dir: run name; iterations land in `output_dir/iter_t/` (default runs/NAME).
    model: the base checkpoint (iteration 0). prompts: json/jsonl of {id, image, question}.
    image_root: images are `image_root/image`. clip: the CLIP directory used as visual judge.
    iterations: T. limit: use only the first N prompts (None = all).
    train: mapping handed to `training.trainers.dpo.run_dpo` on top of what the loop sets
      (model, data, output dir); e.g. lora_r, lora_alpha, learning_rate, beta, num_train_epochs.
    eval_tasks / eval_options / eval_data_root / store: coupled evaluation of the base and every merged
      checkpoint through `evalsuite.run.run_eval`; pair statistics go to `store` as task `csr_pairs`.
    device / dtype: where generation and scoring run (None = cuda if available, else cpu).
    system_prompt / chat_template / image_aspect: the prompt and image settings used identically by
      candidate generation, reward scoring, DPO collation and the coupled evaluation
      (`evalsuite.models.inputs.InputConfig`; configs/csr.yaml sets the released code's).
    """

    name: str = "csr"
    model: str = ""
    prompts: str = ""
    image_root: str = ""
    clip: str = ""
    iterations: int = 3
    output_dir: str | None = None
    limit: int | None = None
    store: str = "results"
    eval_tasks: list[str] = field(default_factory=list)
    eval_options: dict[str, Any] = field(default_factory=dict)
    eval_data_root: str | None = None
    eval_limit: int | None = None
    device: str | None = None
    dtype: str | None = None
    system_prompt: str | None = None
    chat_template: str | None = None
    image_aspect: str = "crop"
    tree: TreeConfig = field(default_factory=TreeConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    pairs: PairConfig = field(default_factory=PairConfig)
    train: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("model", "prompts", "image_root", "clip"):
            _check(bool(getattr(self, name)), f"csr.{name}", "is required")
        _check(self.iterations >= 1, "csr.iterations", "must be >= 1")
        _check(self.limit is None or self.limit >= 1, "csr.limit", "must be >= 1 or null")
        if isinstance(self.eval_tasks, str):
            self.eval_tasks = [t for t in self.eval_tasks.split(",") if t]
        self.input_config()  # bad image_aspect, missing chat_template file: fail before any model loads

    def input_config(self):
        from evalsuite.models.inputs import InputConfig

        return InputConfig(system_prompt=self.system_prompt, chat_template=self.chat_template,
                           image_aspect=self.image_aspect)

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) if self.output_dir else Path("runs") / self.name

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "config") -> "CSRConfig":
        data = dict(data)
        data.pop("method", None)  # training/train.py dispatches on it
        sections = {"tree": TreeConfig, "reward": RewardConfig, "pairs": PairConfig}
        for key, klass in sections.items():
            if key in data:
                data[key] = _build(klass, data[key] or {}, f"{where}: {key}")
        return _build(cls, data, where)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _build(klass, data: dict, where: str):
    if not isinstance(data, dict):
        raise UserError(f"{where}: expected a mapping, got {type(data).__name__}")
    known = {f.name for f in fields(klass)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise UserError(f"{where}: unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return klass(**data)


def load_config(path: str | Path, overrides: list[str] | None = None) -> CSRConfig:
    """Read a YAML preset and apply `key.sub=value` overrides (values parsed as YAML scalars)."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise UserError(f"{path}: config file not found") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return CSRConfig.from_dict(apply_overrides(data, overrides or []), where=str(path))


def apply_overrides(data: dict[str, Any], items: list[str]) -> dict[str, Any]:
    """Apply `key=value` / `section.sub.key=value` overrides to a config mapping in place (values
    parsed as YAML; a leading `--` on the key is ignored)."""
    import yaml

    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"override {item!r}: expected key=value")
        node = data
        *parents, leaf = key.lstrip("-").split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise UserError(f"override {item!r}: {p} is not a section")
        node[leaf] = _yaml_scalar(yaml.safe_load(value))
    return data


def _yaml_scalar(value: Any) -> Any:
    """PyYAML (YAML 1.1) reads `1e-4` as a string; a learning rate written that way is a float."""
    import re

    if isinstance(value, str) and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+", value):
        return float(value)
    return value
