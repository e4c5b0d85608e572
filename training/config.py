"""Training configuration: the VL-RLHF argument names on top of the `transformers.TrainingArguments` fields.

One flat plain dataclass, `TrainConfig`, holds every field (HF trainer fields + the seed's script, LoRA and
DPO fields + evalsuite's own), so callers read `cfg.beta`, `cfg.lora_r`, ... It is built by the
project's one config mechanism (`evalsuite/config.py`: typed fields, YAML, overrides):

    cfg = load_config(["--config", "configs/train/tiny_cpu.yaml", "--loss_type", "ipo"])
    cfg = load_config({"model_name_or_path": "/ckpt", "output_dir": "/out", "data_path": "pairs.json"})

Sources, later wins: the dataclass defaults < the YAML preset < the overrides. Construction checks
keys, types and values (`__post_init__` -> `validate_values`, no file touched), then `check_paths`
checks the files; each problem is one `UserError` naming the field, before any model is loaded.
A field the other settings never read (`lora_r` without `use_lora`, DPO fields under sft, ...:
`config_checks.unread`) is an error when set on the command line, a warning when set by a preset.
The TrainingArguments fields come from `training/hf_fields.py` (a committed copy of their names, types,
defaults and help), so checking a config imports no model library; `check_ready` builds the real
`TrainingArguments` when training starts (its own checks, one line, still before any model loads).

What runs is what is printed: every TrainingArguments field reaches TRL's DPOConfig/SFTConfig with
TrainingArguments' default unless set (TRL's own defaults differ for learning_rate, logging_steps,
bf16 and gradient checkpointing; VL-RLHF ran on TrainingArguments' defaults).

Length semantics (as in VL-RLHF, whose LLaVA kept `<image>` as one token): `max_length`,
`max_prompt_length` and `max_target_length` count *text* tokens; the image placeholder tokens the
processor expands `<image>` into are never counted nor cut.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from evalsuite.config import opt
from evalsuite.errors import UserError
from evalsuite.models.inputs import MOVED_TO_INPUTS, InputConfig
from training.config_checks import (  # noqa: F401 - public names
    PAIR_DATASETS,
    REPORT_TO,
    SFT_DATASETS,
    validate_numbers,
    validate_paths,
    validate_values,
)
from training.config_checks import has_module as _has
from training.config_checks import require as _require
from training.hf_fields import HFTrainingFields

log = logging.getLogger(__name__)

# dpo: VL-RLHF's own default (docs/csr-fidelity.md); sft: VL-RLHF has none (a name is required), vlquery_json
# is the one SFT format; csr: the pair file the CSR loop writes
DEFAULT_DATASET = {"sft": "vlquery_json", "dpo": "vlfeedback_paired", "csr": "csr_pairs"}
# Switches added after training runs and results existed, with the value that says what runs did before them:
# a record without the key meant that value. Old output-folder markers are read so (training/outdir.py), and
# result identities leave the key out at that value (training/csr/train_log.py), so unchanged settings stay
# the same run and keep their result keys.
EARLIER_MEANING = {"lora_scope": "language_model", "lora_merge": "all"}


def earlier_meaning(method: str) -> dict[str, str]:
    """EARLIER_MEANING plus `sft_split`, whose earlier meaning was our held-out split for SFT."""
    return {**EARLIER_MEANING, "sft_split": "held_out" if method == "sft" else "vlrlhf"}


def without_earlier_meaning(mapping: dict, earlier: dict) -> dict:
    """`mapping` less the keys that hold their earlier meaning (for identities written before them)."""
    return {k: v for k, v in mapping.items() if not (k in earlier and v == earlier[k])}
VLRLHF_LLAVA_TEMPLATE = Path(__file__).resolve().parent / "templates" / "vlrlhf_llava.jinja"


@dataclass
class TrainConfig(HFTrainingFields):
    """All training fields: the HF `TrainingArguments` ones (training/hf_fields.py) and, here, the run's,
    the data's, the lengths' (text tokens, see module doc), DPO's, the model's and LoRA's, logging and the
    `inputs:` section; each field's help is `train.py --help`'s line. Where a field follows VL-RLHF's code
    rather than the seed's wording: docs/csr-fidelity.md."""

    method: Literal["sft", "dpo", "csr"] = opt("dpo", "Training method (csr: the CSR loop's DPO stage).")
    config: str | None = opt(None, "YAML preset this config came from (set by the loader).")
    model_name_or_path: str | None = opt(None, "Local checkpoint directory (llava-hf layout).", path="dir")
    iteration: int = opt(0, "Iteration number written into the merged checkpoint's manifest.")
    parent: str | None = opt(None, "Parent recorded in the manifest (default: model_name_or_path).")
    merged_dir: str | None = opt(None, "Where the merged full checkpoint goes (default OUTPUT_DIR/merged).")
    save_merged: bool = opt(True, "Merge the adapter and write a full checkpoint at the end; false: the "
                             "adapter stays in OUTPUT_DIR/adapter (a full fine-tune: its weights in OUTPUT_DIR/model).")
    merge_dtype: Literal["auto", "float32", "float16", "bfloat16"] = opt(
        "auto", "dtype of the merged checkpoint (the LoRA merge itself runs in float32); auto = the base's own.")
    warmup_ratio: float | None = opt(None, "Warmup as a fraction of the training steps (transformers 5 reads it "
                                          "from warmup_steps < 1, where 1.0 would mean one step; give one of the two).",
                                     ge=0, lt=1)
    resume_from_checkpoint: str | bool | None = opt(None, "A checkpoint dir, or true = the latest OUTPUT_DIR/checkpoint-N "
                                                         "(VL-RLHF's bool flag).")
    dataset_name: Literal["vlquery_json", "plain_dpo", "csr_pairs", "vlfeedback_paired", "rlhfv"] | None = opt(
        None, "vlquery_json (SFT) | plain_dpo | csr_pairs | vlfeedback_paired | rlhfv. Default: vlfeedback_paired "
        "for dpo (VL-RLHF's), vlquery_json for sft, csr_pairs for csr.")
    data_path: str | None = opt(None, "Data file (json/jsonl/parquet) or local dataset snapshot directory.", path="any")
    image_root: str | None = opt(None, "Directory joined with each record's image path (escapes refused).", path="dir")
    data_ratio: float = opt(1.0, "Share of the train split kept (VL-RLHF): after the eval_split is held out, the "
                                "first data_ratio of the remaining (shuffled) records train; the rest is unused. sft: "
                                "only with sft_split held_out.", gt=0, le=1)
    eval_split: float | None = opt(None, "Fraction drawn as the eval split (seed 42, as VL-RLHF's "
                                        "train_test_split): held out before data_ratio, except under sft_split "
                                        "vlrlhf (there only an evaluation reads it: eval_strategy steps/epoch "
                                        "or eval_on_start). Default: 0.005 for sft/dpo, 0 for csr.", ge=0, lt=1)
    sft_split: Literal["vlrlhf", "held_out"] = opt(
        "vlrlhf", "How SFT splits its records (sft only): vlrlhf = every record trains in file order, the "
        "eval_split rows too (VL-RLHF's sft.py passes the whole dataset), data_ratio must stay 1 (sft.py ignores "
        "it); held_out = the eval_split rows are held out and data_ratio of the rest trains, as for dpo.")
    dataset_num_proc: int = opt(1, "Processes for dataset preprocessing (datasets.map num_proc).", ge=1)
    skip_missing_images: bool = opt(False, "Drop (and count) records whose image file is missing.")
    score_margin: float = opt(-1.0, "vlfeedback_paired: -1 keeps the largest-gap pair(s); else pairs with gap >= margin.")
    max_length: int = opt(512, "Max text tokens of prompt + target (image tokens not counted).", gt=0)
    max_prompt_length: int = opt(128, "Max text tokens of the prompt, cut (keeping the end) only when prompt + "
                                     "longer answer exceed max_length (TRL 0.8.1); truncation per_field: always.", gt=0)
    max_target_length: int = opt(128, "Unused for decoder-only models, as in VL-RLHF; with truncation per_field "
                                     "it caps every completion / SFT answer (keeps the start).", gt=0)
    truncation: Literal["vlrlhf", "per_field"] = opt(
        "vlrlhf", "vlrlhf: TRL 0.8.1 / VL-RLHF length rules; per_field: every field capped by its own limit.")
    label_pad_token_id: int = opt(-100, "Label id ignored by the loss.")
    beta: float = opt(0.1, "DPO beta.", gt=0)
    loss_type: Literal["sigmoid", "hinge", "ipo", "kto_pair", "ddpo"] = opt("sigmoid", "sigmoid | hinge | ipo | kto_pair | ddpo.")
    ipo_logps: Literal["sum", "mean"] = opt("sum", "ipo on summed sequence log-probs (VL-RLHF) or token means (TRL).")
    ddpo_mask: Literal["replaced", "changed"] = opt(
        "replaced", "ddpo tokens: replaced spans of the label rows (VL-RLHF) or every token outside shared runs.")
    label_smoothing: float = opt(0.0, "cDPO label smoothing (sigmoid/ddpo only).", ge=0, lt=0.5)
    rpo_alpha: float = opt(0.0, "Weight of an NLL term on the chosen response (RPO; TRL's loss_type [sigmoid, sft]).",
                           ge=0)
    precompute_ref_log_probs: bool = opt(False, "Compute reference log-probs once before training and reuse them.")
    freeze_vision_tower: bool = opt(True, "Freeze the vision encoder.")
    use_flash_attention_2: bool = opt(False, "attn_implementation='flash_attention_2' (needs CUDA + flash-attn; a model "
                                            "class without it: one warning, default attention). VL-RLHF's default is "
                                            "true (docs/csr-fidelity.md); llava15_7b_dpo.yaml sets it.")
    use_lora: bool = opt(False, "Train a LoRA adapter instead of all weights.")
    lora_r: int = opt(64, "LoRA rank.")
    lora_alpha: int = opt(16, "LoRA alpha.")
    lora_dropout: float = opt(0.05, "LoRA dropout.")
    lora_target_modules: str = opt("auto", "Comma list of module names/suffixes, or 'auto' (the suffixes of the "
                                          "language model's Linear layers); where they may land: lora_scope.")
    lora_scope: Literal["released", "language_model"] = opt(
        "released", "released = VL-RLHF's and CSR's rule: each name (auto: every suffix of an LM Linear, lm_head "
        "excluded) matches any Linear whose name ends with it, vision tower included (LLaVA: CLIP's q/k/v_proj); "
        "language_model = ours: only Linear layers inside the language model (docs/csr-fidelity.md).")
    lora_merge: Literal["all", "language_model"] = opt(
        "all", "Which LoRA layers the merged checkpoint takes: all (VL-RLHF's merge_peft_model.py) or those in the "
        "language model only, the rest dropped (CSR: LLaVA's merge loads CLIP afresh, so its LoRA is lost).")
    lora_bias: Literal["none", "all", "lora_only"] = opt("none", "none | all | lora_only.")
    q_lora: bool = opt(False, "QLoRA: load the base quantised (needs CUDA + bitsandbytes).")
    bits: int = opt(4, "QLoRA bits: 4 or 8.")
    modules_to_save: str = opt("", "Comma list of extra modules trained fully and saved (e.g. multi_modal_projector).")
    trust_remote_code: bool = opt(False, "Allow custom modelling code in the checkpoint.")
    inputs: InputConfig = opt(help="prompt and image settings, shared with evaluation and CSR (system_prompt, "
                                   "chat_template, image_aspect)", factory=InputConfig)
    chat_format: Literal["template", "vlrlhf_llava"] = opt(
        "template", "template = the checkpoint's chat template (or inputs.chat_template), EOS after every answer; "
        "vlrlhf_llava = VL-RLHF's LLaVA conversation: 'USER: <image>\\n{q}ASSISTANT: {a}' with no separator "
        "between turns and one EOS after the last answer (training/templates/vlrlhf_llava.jinja).")
    project_name: str | None = opt(None, "wandb project.")
    group_name: str | None = opt(None, "wandb group.")
    wandb_mode: str = opt("offline", "offline | online | disabled (WANDB_MODE when unset).")
    save_on_signal: bool = opt(True, "On the first SIGTERM/SIGINT during training: finish the optimizer step, save "
                              "checkpoint-<step> (as save_steps would) and exit 143/130; a second signal stops at once. "
                              "false = stop at once, keeping only the periodic checkpoints (docs/reliability.md).")

    MOVED = MOVED_TO_INPUTS  # `system_prompt:` / `--system_prompt`: one line naming inputs.system_prompt

    @property
    def resolved_dataset(self) -> str:
        return self.dataset_name or DEFAULT_DATASET.get(self.method, "")

    @property
    def merged_path(self) -> Path:
        return Path(self.merged_dir) if self.merged_dir else Path(self.output_dir) / "merged"

    def __post_init__(self) -> None:
        # TrainingArguments would quietly default output_dir to ./trainer_output in the cwd
        _require(bool(self.output_dir), "output_dir", "required (where checkpoints, logs and the merged model go)")
        validate_numbers(self)  # before TrainingArguments' own checks (check_ready), whose messages name no field
        validate_values(self)
        # transformers' own SIGTERM checkpoint would replace save_on_signal's handler (or be replaced by it)
        _require(not (self.enable_jit_checkpoint and self.save_on_signal), "enable_jit_checkpoint",
                 "not with save_on_signal true (both checkpoint on SIGTERM); set save_on_signal false to use it")

    def unread(self) -> list[tuple[str, str, Any, Any]]:
        """Fields the other settings never read (training/config_checks.py `unread`; evalsuite/config.py
        `report_unread` refuses them from the command line, warns about them from a preset)."""
        from training.config_checks import unread

        return unread(self)

    def trainer_kwargs(self) -> dict[str, Any]:
        """Every HF TrainingArguments field as given or defaulted (to build a DPOConfig / SFTConfig from),
        with VL-RLHF's warmup_ratio and resume_from_checkpoint=True resolved."""
        import copy

        kw = copy.deepcopy({f.name: getattr(self, f.name) for f in fields(HFTrainingFields) if f.init})
        if isinstance(kw.get("parallelism_config"), dict):  # hf_fields takes it as a mapping of its fields
            from accelerate.parallelism_config import ParallelismConfig

            kw["parallelism_config"] = ParallelismConfig(**kw["parallelism_config"])
        if self.warmup_ratio is not None:  # transformers 5 dropped warmup_ratio: a float < 1 is a ratio
            kw["warmup_steps"] = self.warmup_ratio
        kw["resume_from_checkpoint"] = resume_checkpoint(self)
        return kw

    def check_paths(self) -> None:
        """The files this config names exist (what `--dry-run` only warns about)."""
        validate_paths(self)
        resume_checkpoint(self)

    def check_training_arguments(self, where: str | None = None) -> None:
        """transformers' own `TrainingArguments` checks (combinations, this machine's bf16/tf32 support), run
        when training starts and before any model loads; its error is one line naming the config."""
        from transformers import TrainingArguments

        try:
            TrainingArguments(**self.trainer_kwargs())
        except (ValueError, TypeError, ImportError) as e:
            where = where or self.config or "config"
            raise UserError(f"{where}: TrainingArguments: {' '.join(str(e).split())}") from None

    def check_ready(self) -> None:
        """What train.py runs before starting: the files exist, then TrainingArguments accepts the fields."""
        self.check_paths()
        self.check_training_arguments()

    def input_config(self):
        """The prompt/image settings shared with evaluation and CSR (evalsuite.models.inputs)."""
        import dataclasses

        if self.chat_format != "vlrlhf_llava":
            return self.inputs
        _require(self.inputs.chat_template is None, "inputs.chat_template",
                 "not with chat_format vlrlhf_llava (it is that format)")
        _require(self.inputs.system_prompt is None, "inputs.system_prompt", "not with chat_format vlrlhf_llava "
                 "(VL-RLHF's LLaVA conversation has no system turn)")
        return dataclasses.replace(self.inputs, chat_template=str(VLRLHF_LLAVA_TEMPLATE))

    def to_dict(self) -> dict[str, Any]:
        """Every field, with secrets (`*_token`) hidden as TrainingArguments.to_dict does (printed, saved)."""
        return {f.name: (f"<{f.name.upper()}>" if f.name.endswith("_token") and getattr(self, f.name)
                         else getattr(self, f.name)) for f in fields(self) if f.init}

    def resolved(self) -> dict[str, Any]:
        """JSON-able resolved config (for manifests and logs)."""
        out = self.to_dict()
        out["dataset_name"] = self.resolved_dataset
        out["inputs"] = self.input_config().to_dict()  # with the chat template file's sha256
        return out


def build_train_config(data: dict[str, Any], where: str = "config", origins: dict | None = None,
                       portable: bool = False, report: bool = True) -> "TrainConfig":
    """A TrainConfig from a mapping through the one config mechanism (`evalsuite.config.build`).

    portable: check keys, types and values without this machine's devices (for `--dry-run` and GPU
    presets validated on a laptop): flash-attention/QLoRA requests that this machine cannot serve, and a
    missing output_dir (presets leave it to the command line), are warnings, not errors. (bf16/tf32 are
    checked against the machine by TrainingArguments itself, in `check_ready` when training starts.)
    report: check fields the settings never read (False inside a config that reports them itself: CSR's
    `train:`, the demo's `sft:`)."""
    from evalsuite.config import build

    data = fold_aliases(dict(data), where)
    if not portable:
        return build(TrainConfig, data, where, origins, report=report)
    if not data.get("output_dir"):
        log.warning("%s: output_dir is not set (required to run)", where)
        data["output_dir"] = "<output_dir>"
    restore = {}
    for key, usable, stand_in in _DEVICE_FIELDS:
        if data.get(key) and not data.get("use_cpu") and not usable():
            log.warning("%s: %s is set but this machine cannot use it; checked without it (the run itself "
                        "needs a machine that can)", where, key)
            restore[key], data[key] = data[key], stand_in
    cfg = build(TrainConfig, data, where, origins, report=False)
    for key, value in restore.items():
        setattr(cfg, key, value)
    if report:  # with the machine's stand-ins put back: the settings as given
        from evalsuite.config import report_unread

        report_unread(cfg, data, where, origins)
    return cfg


# transformers 5 renamed these; the old names (VL-RLHF's scripts use them) are read as the new ones, so no
# FutureWarning is printed and a later source that uses either name wins
ALIASES = {"gradient_checkpointing": "activation_checkpointing",
           "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs"}


def fold_aliases(data: dict[str, Any], where: str = "config") -> dict[str, Any]:
    """Rename deprecated keys of one source to their new names (both in one source: the new one wins)."""
    for old, new in ALIASES.items():
        if old in data:
            value = data.pop(old)
            if new in data:
                log.warning("%s: both %s and %s are set; using %s", where, old, new, new)
            else:
                data[new] = value
    return data


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# (field, can this machine serve it, value it is checked with when it cannot); probed only when set
_DEVICE_FIELDS = (
    ("use_flash_attention_2", lambda: _cuda() and _has("flash_attn"), False),
    ("q_lora", lambda: _cuda() and _has("bitsandbytes"), False),
)

def load_config(source: Any = None, dry_run: bool = False) -> TrainConfig:
    """argv list, YAML path or dict -> validated TrainConfig (see module docstring).

    A list is train.py's command line minus its own switches: `--config F` plus overrides. Paths are
    checked too unless `dry_run` (then `missing_paths` lists them as warnings)."""
    from evalsuite.config import apply_overrides, read_yaml, split_args

    origins: dict[str, str] = {}
    if source is None:
        source = []
    if isinstance(source, dict):
        data, where = dict(source), "config"
    elif isinstance(source, (str, os.PathLike)):
        data, where = read_yaml(source), str(source)
        data.setdefault("config", str(source))
    else:
        own, items = split_args(list(source), ("config",))
        data, where = ({}, "command line")
        if own.get("config"):
            data, where = fold_aliases(read_yaml(own["config"]), own["config"]), str(own["config"])
            data.setdefault("config", str(own["config"]))
        apply_overrides(data, [(ALIASES.get(k, k), v) for k, v in items], origins)
    cfg = build_train_config(data, where, origins, portable=dry_run)
    if not dry_run:
        cfg.check_paths()
    return cfg


def resume_checkpoint(cfg: TrainConfig) -> str | None:
    """`resume_from_checkpoint` as VL-RLHF's bool flag or HF's path: true -> the latest complete checkpoint-N
    in output_dir (training/resume.py: half-written folders skipped; an error when there is none, or
    when the latest holds the weights only), false/empty -> None, anything else -> that path, which must be
    complete too (transformers would resume a weights-only folder with a fresh optimizer and LR schedule)."""
    from training.resume import checkpoint_problem, latest_checkpoint

    value = cfg.resume_from_checkpoint
    if value is None or str(value).strip().lower() in ("", "false", "none"):
        return None
    if str(value).strip().lower() != "true":
        _require(Path(value).is_dir(), "resume_from_checkpoint", f"no such checkpoint directory {str(value)!r}")
        why = checkpoint_problem(value)
        _require(why is None, "resume_from_checkpoint", f"{value}: {why}")
        return str(value)
    found, why = latest_checkpoint(cfg.output_dir)
    _require(found is not None, "resume_from_checkpoint", f"true, but {why}")
    return str(found)
