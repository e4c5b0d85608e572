"""Training configuration: the VL-RLHF argument names on top of `transformers.TrainingArguments`.

One flat dataclass, `TrainConfig`, holds every field (HF trainer fields + the seed's script, LoRA and
DPO fields + evalsuite's own), so `--help` lists them all and callers read `cfg.beta`, `cfg.lora_r`, ...

Sources, later wins: the dataclass defaults < `--config X.yaml` < command-line flags.

    cfg = load_config(["--config", "configs/train/tiny_cpu.yaml", "--loss_type", "ipo"])
    cfg = load_config({"model_name_or_path": "/ckpt", "output_dir": "/out", "data_path": "pairs.json"})

`validate(cfg)` rejects bad values and impossible combinations with a `UserError` naming the field,
before any model or dataset is loaded. Length semantics (as in VL-RLHF, whose LLaVA kept `<image>` as
one token): `max_length`, `max_prompt_length` and `max_target_length` count *text* tokens; the image
placeholder tokens the processor expands `<image>` into are never counted nor cut.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from transformers import TrainingArguments

from evalsuite.errors import UserError

METHODS = ("sft", "dpo", "csr", "demo")
# Which dataset formats each method trains on (the loaders live in training/data/).
SFT_DATASETS = ("vlquery_json",)
PAIR_DATASETS = ("plain_dpo", "csr_pairs", "vlfeedback_paired", "rlhfv")
DEFAULT_DATASET = {"sft": "vlquery_json", "dpo": "plain_dpo", "csr": "csr_pairs"}
REPORT_TO = ("none", "tensorboard", "wandb")


def _f(default: Any, help: str, **kw) -> Any:
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class TrainConfig(TrainingArguments):
    """All training fields. Beyond the HF `TrainingArguments` ones (output_dir, learning_rate, ...):

    Run: `method` (sft|dpo|csr|demo), `config` (the YAML it came from), `model_name_or_path` (a local
    checkpoint dir; nothing is downloaded), `iteration` and `parent` (written into the merged
    checkpoint's manifest; parent defaults to model_name_or_path), `merged_dir` (default
    OUTPUT_DIR/merged), `save_merged`.
    Data: `dataset_name`, `data_path`, `image_root`, `data_ratio` (fraction used for training, the rest
    is the eval split), `dataset_num_proc`, `skip_missing_images`, `score_margin` (vlfeedback_paired).
    Lengths (text tokens, see module doc): `max_length`, `max_prompt_length`, `max_target_length`.
    DPO: `beta`, `loss_type` (sigmoid|hinge|ipo|kto_pair|ddpo), `label_smoothing`,
    `precompute_ref_log_probs` (reference pass once before training, adapter disabled).
    Model: `freeze_vision_tower`, `use_flash_attention_2`, `use_lora`, `lora_r`, `lora_alpha`,
    `lora_dropout`, `lora_target_modules` (comma list or `auto` = every Linear of the language model),
    `lora_bias`, `q_lora`, `bits`, `modules_to_save`, `trust_remote_code`.
    Logging: `project_name`, `group_name` (wandb project / group), `wandb_mode` (offline by default).
    Inputs (shared with evaluation and CSR, `evalsuite.models.inputs`): `system_prompt`, `chat_template`
    (a Jinja file), `image_aspect` (crop | pad).
    """

    method: str = _f("dpo", "Training method.", choices=list(METHODS))
    config: str | None = _f(None, "YAML file of defaults; command-line flags override it.")
    model_name_or_path: str | None = _f(None, "Local checkpoint directory (llava-hf layout).")
    iteration: int = _f(0, "Iteration number written into the merged checkpoint's manifest.")
    parent: str | None = _f(None, "Parent recorded in the manifest (default: model_name_or_path).")
    merged_dir: str | None = _f(None, "Where the merged full checkpoint goes (default OUTPUT_DIR/merged).")
    save_merged: bool = _f(True, "Merge the adapter and write a full checkpoint at the end.")
    dataset_name: str | None = _f(None, "vlquery_json (SFT) | plain_dpo | csr_pairs | vlfeedback_paired | rlhfv.")
    data_path: str | None = _f(None, "Data file (json/jsonl/parquet) or local dataset snapshot directory.")
    image_root: str | None = _f(None, "Directory joined with each record's image path (escapes refused).")
    data_ratio: float = _f(1.0, "Fraction of records used for training; the rest is the eval split.")
    dataset_num_proc: int = _f(1, "Processes for dataset preprocessing (datasets.map num_proc).")
    skip_missing_images: bool = _f(False, "Drop (and count) records whose image file is missing.")
    score_margin: float = _f(-1.0, "vlfeedback_paired: -1 keeps the largest-gap pair(s); else pairs with gap >= margin.")
    max_length: int = _f(512, "Max text tokens of prompt + target (image tokens not counted).")
    max_prompt_length: int = _f(128, "Max text tokens of the prompt (keeps the end).")
    max_target_length: int = _f(128, "Max tokens of each target/completion (keeps the start).")
    label_pad_token_id: int = _f(-100, "Label id ignored by the loss.")
    beta: float = _f(0.1, "DPO beta.")
    loss_type: str = _f("sigmoid", "sigmoid | hinge | ipo | kto_pair | ddpo.")
    label_smoothing: float = _f(0.0, "cDPO label smoothing (sigmoid/ddpo only), in [0, 0.5).")
    rpo_alpha: float = _f(0.0, "Weight of an NLL term on the chosen response (RPO; TRL's loss_type [sigmoid, sft]).")
    precompute_ref_log_probs: bool = _f(False, "Compute reference log-probs once before training and reuse them.")
    freeze_vision_tower: bool = _f(True, "Freeze the vision encoder.")
    use_flash_attention_2: bool = _f(False, "attn_implementation='flash_attention_2' (needs CUDA + flash-attn).")
    use_lora: bool = _f(False, "Train a LoRA adapter instead of all weights.")
    lora_r: int = _f(64, "LoRA rank.")
    lora_alpha: int = _f(16, "LoRA alpha.")
    lora_dropout: float = _f(0.05, "LoRA dropout.")
    lora_target_modules: str = _f("auto", "Comma list of module names/suffixes, or 'auto' (all LM linears).")
    lora_bias: str = _f("none", "none | all | lora_only.")
    q_lora: bool = _f(False, "QLoRA: load the base quantised (needs CUDA + bitsandbytes).")
    bits: int = _f(4, "QLoRA bits: 4 or 8.")
    modules_to_save: str = _f("", "Comma list of extra modules trained fully and saved (e.g. multi_modal_projector).")
    trust_remote_code: bool = _f(False, "Allow custom modelling code in the checkpoint.")
    system_prompt: str | None = _f(None, "System message put before every conversation (default: none; the "
                                   "checkpoint's chat template decides).")
    chat_template: str | None = _f(None, "Jinja chat template file used instead of the checkpoint's.")
    image_aspect: str = _f("crop", "crop = the processor's own resizing; pad = pad to a square with the image "
                           "mean colour first (LLaVA-1.5's image_aspect_ratio=pad).", choices=["crop", "pad"])
    project_name: str | None = _f(None, "wandb project.")
    group_name: str | None = _f(None, "wandb group.")
    wandb_mode: str = _f("offline", "offline | online | disabled (WANDB_MODE when unset).")

    @property
    def resolved_dataset(self) -> str:
        return self.dataset_name or DEFAULT_DATASET.get(self.method, "")

    @property
    def merged_path(self) -> Path:
        return Path(self.merged_dir) if self.merged_dir else Path(self.output_dir) / "merged"

    def trainer_kwargs(self) -> dict[str, Any]:
        """The HF TrainingArguments fields as given (to build a DPOConfig / SFTConfig from)."""
        names = {f.name for f in fields(TrainingArguments) if f.init}
        return {k: v for k, v in self._given.items() if k in names}

    def input_config(self):
        """The prompt/image settings shared with evaluation and CSR (evalsuite.models.inputs)."""
        from evalsuite.models.inputs import InputConfig

        return InputConfig(system_prompt=self.system_prompt, chat_template=self.chat_template,
                           image_aspect=self.image_aspect)

    def resolved(self) -> dict[str, Any]:
        """JSON-able resolved config (for manifests and logs)."""
        out = self.to_dict()
        out["dataset_name"] = self.resolved_dataset
        out["inputs"] = self.input_config().to_dict()  # with the chat template file's sha256
        return out


def _parser(*extra_types):
    from transformers import HfArgumentParser

    parser = HfArgumentParser((TrainConfig, *extra_types))

    def error(message: str):  # argparse would print usage + exit; we want one line via UserError
        raise UserError(f"arguments: {message}")

    parser.error = error
    return parser


def _split_config_flag(argv: list[str]) -> tuple[str | None, list[str]]:
    rest, path, i = [], None, 0
    while i < len(argv):
        a = argv[i]
        if a == "--config":
            if i + 1 >= len(argv):
                raise UserError("arguments: --config needs a path")
            path, i = argv[i + 1], i + 2
            continue
        if a.startswith("--config="):
            path = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    return path, rest


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise UserError(f"--config: no such file {str(p)!r}")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise UserError(f"{p}: invalid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UserError(f"{p}: expected a mapping of field: value, got {type(data).__name__}")
    return data


def _as_default(value: Any) -> Any:
    # argparse converts string defaults with the field's type (and reports bad ones through
    # parser.error); scalars from YAML are stringified so they get the same checks as flags.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


def parse_config(source: Any = None, *extra_types) -> tuple:
    """Parse argv (list), a YAML path (str/Path) or a dict into (TrainConfig, *extras), validated.

    `extra_types` are further dataclasses (e.g. the CSR loop's own arguments) parsed from the same
    sources; their fields share the YAML and the command line.
    """
    if source is None:
        source = []
    if isinstance(source, dict):
        base, origin, argv = dict(source), "config", []
    elif isinstance(source, (str, os.PathLike)):
        base, origin, argv = read_yaml(source), str(source), []
    else:
        path, argv = _split_config_flag(list(source))
        base, origin = (read_yaml(path), path) if path else ({}, "config")
        if path:
            base.setdefault("config", path)
    parser = _parser(*extra_types)
    known = {a.dest for a in parser._actions}
    unknown = sorted(set(base) - known)
    if unknown:
        raise UserError(f"{origin}: unknown field(s) {', '.join(unknown)}")
    parser.set_defaults(**{k: _as_default(v) for k, v in base.items()})
    namespace, leftover = parser.parse_known_args(argv)
    if leftover:
        raise UserError(f"arguments: unrecognized {' '.join(leftover)}")
    given = vars(namespace)
    objs = []
    for dtype in (TrainConfig, *extra_types):
        names = {f.name for f in fields(dtype) if f.init}
        try:
            objs.append(dtype(**{k: v for k, v in given.items() if k in names}))
        except (ValueError, TypeError) as e:
            raise UserError(f"{origin}: {str(e).splitlines()[0]}") from None
    cfg = objs[0]
    object.__setattr__(cfg, "_given", {k: v for k, v in given.items()})
    validate(cfg)
    return tuple(objs)


def load_config(source: Any = None) -> TrainConfig:
    """argv list, YAML path or dict -> validated TrainConfig (see module docstring)."""
    return parse_config(source)[0]


def _require(cond: bool, field_name: str, message: str) -> None:
    if not cond:
        raise UserError(f"{field_name}: {message}")


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def validate(cfg: TrainConfig) -> TrainConfig:
    """Reject bad values and combinations; no model, dataset or image is touched."""
    _require(cfg.method in METHODS, "method", f"{cfg.method!r} is not one of {', '.join(METHODS)}")
    if cfg.method == "demo":
        return cfg  # the demo builds its own model and data; its main checks its own arguments
    _require(bool(cfg.model_name_or_path), "model_name_or_path", "required")
    model_dir = Path(cfg.model_name_or_path)
    _require(model_dir.is_dir(), "model_name_or_path", f"{str(model_dir)!r} is not a local checkpoint directory")
    _require((model_dir / "config.json").is_file(), "model_name_or_path", f"no config.json in {str(model_dir)!r}")
    _require(bool(cfg.output_dir), "output_dir", "required")
    _validate_data(cfg)
    _validate_lengths(cfg)
    _validate_dpo(cfg)
    _validate_model(cfg)
    _validate_logging(cfg)
    cfg.input_config()  # image_aspect value, chat_template file, empty system_prompt
    return cfg


def _validate_data(cfg: TrainConfig) -> None:
    name = cfg.resolved_dataset
    allowed = SFT_DATASETS if cfg.method == "sft" else PAIR_DATASETS
    _require(name in allowed, "dataset_name", f"{name!r} is not a {cfg.method} dataset ({', '.join(allowed)})")
    if cfg.method != "csr":  # the CSR loop writes its pair file per iteration
        _require(bool(cfg.data_path), "data_path", "required")
        _require(Path(cfg.data_path).exists(), "data_path", f"no such file or directory {cfg.data_path!r}")
    if cfg.image_root:
        _require(Path(cfg.image_root).is_dir(), "image_root", f"no such directory {cfg.image_root!r}")
    _require(0.0 < cfg.data_ratio <= 1.0, "data_ratio", f"must be in (0, 1], got {cfg.data_ratio}")
    _require(cfg.dataset_num_proc >= 1, "dataset_num_proc", f"must be >= 1, got {cfg.dataset_num_proc}")


def _validate_lengths(cfg: TrainConfig) -> None:
    for name in ("max_length", "max_prompt_length", "max_target_length"):
        _require(getattr(cfg, name) > 0, name, f"must be > 0, got {getattr(cfg, name)}")
    _require(cfg.max_prompt_length < cfg.max_length, "max_prompt_length",
             f"{cfg.max_prompt_length} leaves no room for the target within max_length {cfg.max_length}")


def _validate_dpo(cfg: TrainConfig) -> None:
    from training.losses import LOSSES

    _require(cfg.rpo_alpha >= 0, "rpo_alpha", f"{cfg.rpo_alpha} must be >= 0")
    _require(cfg.loss_type in LOSSES, "loss_type", f"{cfg.loss_type!r} is not one of {', '.join(LOSSES)}")
    _require(cfg.beta > 0, "beta", f"must be > 0, got {cfg.beta}")
    _require(0.0 <= cfg.label_smoothing < 0.5, "label_smoothing", f"must be in [0, 0.5), got {cfg.label_smoothing}")
    if cfg.label_smoothing > 0:
        _require(cfg.loss_type in ("sigmoid", "ddpo"), "label_smoothing",
                 f"only defined for sigmoid/ddpo, not {cfg.loss_type}")


def _validate_model(cfg: TrainConfig) -> None:
    import torch

    if cfg.use_lora:
        _require(cfg.lora_r > 0, "lora_r", f"must be > 0, got {cfg.lora_r}")
        _require(cfg.lora_alpha > 0, "lora_alpha", f"must be > 0, got {cfg.lora_alpha}")
        _require(0.0 <= cfg.lora_dropout < 1.0, "lora_dropout", f"must be in [0, 1), got {cfg.lora_dropout}")
        _require(cfg.lora_bias in ("none", "all", "lora_only"), "lora_bias", f"{cfg.lora_bias!r} is not none|all|lora_only")
        _require(bool(cfg.lora_target_modules.strip(",").strip()), "lora_target_modules", "empty")
    if cfg.q_lora:
        _require(cfg.use_lora, "q_lora", "needs --use_lora true")
        _require(cfg.bits in (4, 8), "bits", f"must be 4 or 8, got {cfg.bits}")
        _require(torch.cuda.is_available(), "q_lora", "needs a CUDA GPU (bitsandbytes quantisation)")
        _require(_has("bitsandbytes"), "q_lora", "needs the bitsandbytes package (pip install bitsandbytes)")
    if cfg.use_flash_attention_2:
        _require(torch.cuda.is_available(), "use_flash_attention_2", "needs a CUDA GPU")
        _require(_has("flash_attn"), "use_flash_attention_2", "needs the flash-attn package (pip install flash-attn)")
    if cfg.precompute_ref_log_probs:
        _require(cfg.method in ("dpo", "csr"), "precompute_ref_log_probs", "only for DPO-family training")


def _validate_logging(cfg: TrainConfig) -> None:
    targets = [t for t in (cfg.report_to or []) if t != "none"] if isinstance(cfg.report_to, list) else [cfg.report_to]
    for t in targets:
        _require(t in REPORT_TO, "report_to", f"{t!r} is not one of {', '.join(REPORT_TO)}")
    if "tensorboard" in targets:
        _require(_has("tensorboard") or _has("tensorboardX"), "report_to", "tensorboard needs the tensorboard package")
    if "wandb" in targets:
        _require(_has("wandb"), "report_to", "wandb needs the wandb package")
    _require(cfg.wandb_mode in ("offline", "online", "disabled"), "wandb_mode",
             f"{cfg.wandb_mode!r} is not offline|online|disabled")
