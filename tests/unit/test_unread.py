"""A field the resulting settings never read (evalsuite/config.py `report_unread`, each class's `unread()`):
set on the command line, exit 2 with one line naming the field and the switch; set by a preset, one
warning line and the run goes on; left at its default, nothing. Every shipped preset's own command says
nothing, and a preset that sets LoRA fields still runs under --use_lora false (with the warning)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from tests.conftest import cli_inprocess, train_inprocess

REPO = Path(__file__).resolve().parents[2]
TRAIN = ["--output_dir", "o", "--model_name_or_path", "m", "--data_path", "d.json", "--dry-run"]
CSR = ["model=m", "prompts=p.jsonl", "image_root=i", "clip=c", "--dry-run"]
DEMO = REPO / "configs" / "demo_tiny.yaml"
EVAL = ["run", "--ckpt", "c", "--tasks", "caption", "--dry-run", "--world"]

# (method, the switches, field, value, the switch as the error names it and its value there, what it asks for)
CASES = [
    ("dpo", [], "lora_r", "8", "use_lora false", "--use_lora true"),
    ("dpo", [], "lora_alpha", "8", "use_lora false", "--use_lora true"),
    ("dpo", [], "lora_dropout", "0.1", "use_lora false", "--use_lora true"),
    ("dpo", [], "lora_target_modules", "q_proj", "use_lora false", "--use_lora true"),
    ("dpo", [], "lora_scope", "language_model", "use_lora false", "--use_lora true"),
    ("dpo", [], "lora_merge", "language_model", "use_lora false", "--use_lora true"),
    ("dpo", [], "lora_bias", "all", "use_lora false", "--use_lora true"),
    ("dpo", [], "modules_to_save", "multi_modal_projector", "use_lora false", "--use_lora true"),
    ("dpo", [], "bits", "8", "q_lora false", "--q_lora true"),
    ("dpo", ["--use_lora", "true", "--save_merged", "false"], "lora_merge", "language_model", "save_merged false",
     "--save_merged true"),
    ("dpo", ["--save_merged", "false"], "merge_dtype", "float32", "save_merged false", "--save_merged true"),
    ("dpo", ["--save_merged", "false"], "merged_dir", "x", "save_merged false", "--save_merged true"),
    ("dpo", ["--save_merged", "false"], "iteration", "2", "save_merged false", "--save_merged true"),
    ("dpo", ["--save_merged", "false"], "parent", "p", "save_merged false", "--save_merged true"),
    ("sft", [], "beta", "0.2", "method sft", "--method dpo"),
    ("sft", [], "loss_type", "ipo", "method sft", "--method dpo"),
    ("sft", [], "label_smoothing", "0.1", "method sft", "--method dpo"),
    ("sft", [], "rpo_alpha", "1", "method sft", "--method dpo"),
    ("sft", [], "precompute_ref_log_probs", "true", "method sft", "--method dpo"),
    ("sft", [], "data_ratio", "0.5", "sft_split vlrlhf", "--sft_split held_out"),
    ("sft", [], "max_prompt_length", "64", "truncation vlrlhf", "--truncation per_field"),
    ("dpo", [], "sft_split", "held_out", "method dpo", "--method sft"),
    ("dpo", [], "ipo_logps", "mean", "loss_type sigmoid", "--loss_type ipo"),
    ("dpo", ["--loss_type", "ipo"], "ddpo_mask", "changed", "loss_type ipo", "--loss_type ddpo"),
    ("dpo", ["--loss_type", "ipo"], "label_smoothing", "0.1", "loss_type ipo", "--loss_type sigmoid"),
    ("dpo", [], "max_target_length", "64", "truncation vlrlhf", "--truncation per_field"),
    ("dpo", ["--dataset_name", "plain_dpo"], "score_margin", "1", "dataset_name plain_dpo",
     "--dataset_name vlfeedback_paired"),
    ("dpo", [], "wandb_mode", "online", "report_to none", "--report_to wandb"),
    ("dpo", [], "project_name", "p", "report_to none", "--report_to wandb"),
    ("dpo", [], "group_name", "g", "report_to none", "--report_to wandb"),
    ("dpo", [], "eval_steps", "10", "eval_strategy no", "--eval_strategy steps"),
    ("dpo", ["--save_strategy", "no"], "save_steps", "10", "save_strategy no", "--save_strategy steps"),
    ("dpo", ["--logging_strategy", "epoch"], "logging_steps", "10", "logging_strategy epoch",
     "--logging_strategy steps"),
    # transformers' evaluation loop alone reads these; nothing in training/ calls evaluate()
    ("dpo", [], "per_device_eval_batch_size", "4", "eval_strategy no", "--eval_strategy steps"),
    ("dpo", [], "eval_delay", "2", "eval_strategy no", "--eval_strategy steps"),
    ("dpo", ["--eval_on_start", "true"], "eval_delay", "2", "eval_strategy no", "--eval_strategy steps"),
    ("dpo", [], "eval_accumulation_steps", "2", "eval_strategy no", "--eval_strategy steps"),
    ("dpo", [], "eval_do_concat_batches", "false", "eval_strategy no", "--eval_strategy steps"),
    ("dpo", [], "eval_use_gather_object", "true", "eval_strategy no", "--eval_strategy steps"),
    ("dpo", [], "include_for_metrics", "[loss]", "eval_strategy no", "--eval_strategy steps"),
    ("dpo", [], "batch_eval_metrics", "true", "eval_strategy no", "--eval_strategy steps"),
    ("sft", [], "eval_split", "0.1", "eval_strategy no", "--eval_strategy steps"),  # its rows train too (vlrlhf)
    ("dpo", ["--save_strategy", "no", "--save_on_signal", "false"], "save_total_limit", "2", "save_strategy no",
     "--save_strategy steps"),
    # the reference path reads the KV budget only where a count cap is null
    ("csr", ["tree.engine=reference", "tree.batch_nodes=8", "tree.prompt_batch=2"], "tree.kv_budget", "1000",
     "tree.batch_nodes 8", None),
    ("csr", ["tree.engine=vllm"], "tree.kv_budget", "1000", "tree.engine vllm", "tree.engine=pool"),
    ("csr", ["tree.expander=sample", "tree.batch_nodes=8", "tree.prompt_batch=2"], "tree.kv_budget", "1000",
     "tree.batch_nodes 8", None),
    ("csr", ["tree.engine=reference"], "tree.share_prefix", "false", "tree.engine reference", "tree.engine=pool"),
    ("csr", ["tree.expander=sample"], "tree.share_prefix", "false", "tree.expander sample", "tree.expander=group_beam"),
    ("csr", [], "tree.seed", "3", "tree.expander group_beam", "tree.expander=sample"),
    ("csr", [], "tree.num_samples", "3", "tree.expander group_beam", "tree.expander=sample"),
    ("csr", [], "tree.temperature", "0.5", "tree.expander group_beam", "tree.expander=sample"),
    ("csr", [], "tree.top_p", "0.5", "tree.expander group_beam", "tree.expander=sample"),
    ("csr", ["tree.expander=sample"], "tree.diversity_penalty", "1.0", "tree.expander sample",
     "tree.expander=group_beam"),
    ("csr", ["tree.expander=sample"], "tree.num_beams", "10", "tree.expander sample", "tree.expander=group_beam"),
    ("csr", [], "tree.sentence_end", "[x]", "tree.stop released", "tree.stop=sentence_marks"),
    ("csr", ["tree.stop=sentence_marks"], "tree.period_id", "9", "tree.stop sentence_marks", "tree.stop=released"),
    ("csr", [], "reward.lm_batch", "8", "reward.language_score beam", "reward.language_score=teacher_forced"),
    ("csr", [], "pairs.min_paths", "3", "pairs.guards false", "pairs.guards=true"),
    ("csr", [], "pairs.min_gap", "0.1", "pairs.guards false", "pairs.guards=true"),
    ("csr", [], "train.lora_r", "8", "train.use_lora false", "train.use_lora=true"),
    ("csr", ["train.loss_type=ipo"], "train.label_smoothing", "0.1", "train.loss_type ipo",
     "train.loss_type=sigmoid"),
    ("csr", [], "train.per_device_eval_batch_size", "4", "train.eval_strategy no", "train.eval_strategy=steps"),
    ("demo", ["--hallucination_rate", "0"], "hallucination", "random", "hallucination_rate 0.0", None),
    ("demo", [], "sft.beta", "0.2", "sft.method sft", None),  # the demo sets sft.method: drop is the fix
    ("csr", [], "train.sft_split", "held_out", "train.method csr", None),  # the loop sets train.method
    ("demo", ["csr.tree.engine=vllm"], "csr.tree.kv_budget", "1000", "csr.tree.engine vllm",
     "csr.tree.engine=pool"),
    # the loop's evaluation does not pass evalsuite run's section check: a section no eval task reads
    ("csr", ["eval.tasks=[pope]", "eval.world=true"], "eval.chair.n_images", "7", "eval.tasks pope", None),
    ("csr", ["eval.tasks=[pope]", "eval.world=true"], "eval.gen.temperature", "0.5", "eval.tasks pope", None),
    ("eval", [], "gen.temperature", "0.5", "gen.do_sample false", "gen.do_sample=true"),
    ("eval", [], "gen.top_p", "0.5", "gen.do_sample false", "gen.do_sample=true"),
    ("eval", [], "vllm.kv_cache_gib", "2", "engine hf", "--engine vllm"),
    ("eval", [], "vllm.tensor_parallel_size", "2", "engine hf", "--engine vllm"),
]


def _cli(method: str, items: list[str], tmp_path: Path, preset: Path | None = None):
    conf = ["--config", str(preset)] if preset else []
    if method == "eval":
        return cli_inprocess(EVAL[0], *conf, *items, *EVAL[1:], cwd=tmp_path)
    if method == "demo":
        return train_inprocess(*(conf or ["--config", str(DEMO)]), *items, "--dry-run", cwd=tmp_path)
    base = TRAIN if method in ("sft", "dpo") else CSR
    return train_inprocess("--method", method, *conf, *items, *base, cwd=tmp_path)


def _merge(a: dict, b: dict) -> dict:
    return {**a, **{k: _merge(a[k], v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
                    for k, v in b.items()}}


def _item(key: str, value: str) -> list[str]:
    return [f"{key}={value}"] if "." in key else [f"--{key}", value]


def _mapping(items: list[str]) -> dict:
    """`--k v` / `a.b=v` items as the preset mapping that sets the same (strategy words kept as text)."""
    out: dict = {}
    pairs = [(items[i][2:], items[i + 1]) for i in range(0, len(items), 2)] if items and items[0].startswith("--") \
        else [tuple(i.split("=", 1)) for i in items]
    for key, value in pairs:
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value if value in ("no", "epoch", "steps") else yaml.safe_load(value)
    return out


def _error_line(res) -> str:
    lines = [ln for ln in res.stderr.splitlines() if "error" in ln]
    assert res.returncode == 2 and len(lines) == 1, (res.returncode, res.stderr)
    return lines[0]


@pytest.mark.parametrize("method, switches, field, value, under, fix", CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_set_on_the_command_line_it_is_one_error_naming_field_and_switch(tmp_path, method, switches, field, value,
                                                                         under, fix):
    res = _cli(method, switches + _item(field, value), tmp_path)
    asked = f"pass {fix} or " if fix else ""
    assert _error_line(res).endswith(f"command line: {field}: has no effect with {under}; {asked}drop {field}")


@pytest.mark.parametrize("method, switches, field, value, under, fix", CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_set_by_a_preset_it_is_one_warning_and_the_run_goes_on(tmp_path, method, switches, field, value, under, fix):
    data = _mapping(switches + _item(field, value))
    if method == "demo":
        data = _merge(yaml.safe_load(DEMO.read_text()), data)
    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump(data))
    res = _cli(method, [], tmp_path, preset)
    assert res.returncode == 0, res.stderr
    warned = [ln for ln in res.stderr.splitlines() if "set but without effect" in ln]
    assert len(warned) == 1 and re.search(rf"\b{re.escape(field)}\b[^;]*\(under {re.escape(under)}\)", warned[0]), \
        res.stderr


def test_left_at_its_default_it_says_nothing(tmp_path):
    for method in ("dpo", "sft", "csr", "eval"):
        res = _cli(method, [], tmp_path)
        assert res.returncode == 0 and "without effect" not in res.stderr, (method, res.stderr)


def test_the_fields_read_under_the_setting_are_accepted(tmp_path):
    """The same fields with the switch that reads them: no error, no warning."""
    for method, items in (("dpo", ["--use_lora", "true", "--lora_r", "8", "--lora_merge", "language_model"]),
                          ("dpo", ["--loss_type", "ipo", "--ipo_logps", "mean"]),
                          ("sft", ["--sft_split", "held_out", "--data_ratio", "0.5"]),
                          ("dpo", ["--truncation", "per_field", "--max_target_length", "64"]),
                          ("dpo", ["--eval_strategy", "steps", "--eval_steps", "5", "--eval_delay", "2",
                                   "--per_device_eval_batch_size", "4"]),
                          ("dpo", ["--eval_on_start", "true", "--per_device_eval_batch_size", "4"]),
                          ("sft", ["--eval_strategy", "epoch", "--eval_split", "0.1"]),
                          ("sft", ["--eval_on_start", "true", "--eval_split", "0.1"]),
                          ("sft", ["--sft_split", "held_out", "--eval_split", "0.1"]),
                          ("dpo", ["--eval_split", "0.1"]),  # the eval rows leave training (eval_strategy no)
                          ("dpo", ["--save_strategy", "steps", "--save_total_limit", "2"]),
                          ("dpo", ["--save_strategy", "no", "--save_total_limit", "2"]),  # the signal's save
                          ("dpo", ["--save_strategy", "no", "--save_on_signal", "false", "--enable_jit_checkpoint",
                                   "true", "--save_total_limit", "2"]),
                          ("csr", ["tree.expander=sample", "tree.seed=3", "tree.num_samples=3"]),
                          ("csr", ["tree.engine=pool", "tree.kv_budget=1000"]),
                          ("eval", ["gen.do_sample=true", "gen.temperature=0.5"])):
        res = _cli(method, items, tmp_path)
        assert res.returncode == 0 and "without effect" not in res.stderr, (items, res.stderr)


def _preset_commands():
    for p in sorted((REPO / "configs").rglob("*.yaml")):
        first = p.read_text().splitlines()[0]
        name = p.relative_to(REPO).as_posix()
        if ("train.py" in first or "evalsuite run" in first) and "accelerate/" not in name:  # accelerate's own
            yield name, first


@pytest.mark.parametrize("name, first", list(_preset_commands()), ids=[n for n, _ in _preset_commands()])
def test_every_shipped_preset_runs_its_own_command_without_a_warning(name, first, tmp_path):
    """The command in each preset's first comment, dry-run: no error and no unread-field warning."""
    words = shlex.split(first.lstrip("# ").split("(")[0])
    args = words[words.index("training/train.py") + 1:] if "training/train.py" in words else \
        ["run"] + words[words.index("run") + 1:]
    args = args or ["--config", name]  # demo.yaml: no arguments = this file (--dry-run alone names no method)
    assert name in args, (name, first)
    args = [str(REPO / a) if a.startswith("configs/") else a for a in args]
    res = (train_inprocess if args[0] != "run" else cli_inprocess)(*args, "--dry-run", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "without effect" not in res.stderr, res.stderr


@pytest.mark.parametrize("name, flag", [("train/tiny_cpu.yaml", "--use_lora"),
                                        ("train/llava15_7b_dpo.yaml", "--use_lora"),
                                        ("csr.yaml", "train.use_lora")])
def test_a_lora_preset_runs_without_lora_with_one_warning(name, flag, tmp_path):
    """Presets that set LoRA fields stay usable under --use_lora false: a warning, not an error."""
    preset = str(REPO / "configs" / name)
    items = [flag, "false"] if flag.startswith("--") else [f"{flag}=false"]
    res = (train_inprocess("--config", preset, *items, *TRAIN, cwd=tmp_path) if "train/" in name
           else train_inprocess("--config", preset, *items, "--dry-run", cwd=tmp_path))
    assert res.returncode == 0, res.stderr
    warned = [ln for ln in res.stderr.splitlines() if "set but without effect" in ln]
    assert len(warned) == 1 and "lora_r" in warned[0] and "use_lora false)" in warned[0], res.stderr


def test_the_zero3_command_warns_that_the_presets_merge_setting_is_unread(tmp_path):
    """configs/accelerate/zero3.yaml's command adds --save_merged false (the merge runs elsewhere): the
    preset's lora_merge then reaches nothing, a warning; the command itself runs."""
    first = (REPO / "configs" / "accelerate" / "zero3.yaml").read_text().splitlines()[0]
    assert "--save_merged false" in first
    res = train_inprocess("--config", str(REPO / "configs" / "train" / "llava15_7b_dpo.yaml"), "--save_merged",
                          "false", *TRAIN, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    warned = [ln for ln in res.stderr.splitlines() if "set but without effect" in ln]
    assert len(warned) == 1 and warned[0].endswith("lora_merge (under save_merged false)"), res.stderr


def test_logging_steps_is_read_where_eval_steps_falls_back_to_it(tmp_path):
    """Under eval_strategy steps with eval_steps unset, TrainingArguments evaluates every logging_steps
    (training/hf_fields.py eval_steps' help), whatever logging_strategy says: not refused there; with
    eval_steps set it is unread again, and a fallback of 0 is one line naming logging_steps."""
    items = ["--logging_strategy", "epoch", "--eval_strategy", "steps", "--logging_steps", "7"]
    res = _cli("dpo", items, tmp_path)
    assert res.returncode == 0 and "without effect" not in res.stderr, res.stderr
    assert _error_line(_cli("dpo", items + ["--eval_steps", "5"], tmp_path)).endswith(
        "command line: logging_steps: has no effect with logging_strategy epoch; pass --logging_strategy steps "
        "or drop logging_steps")
    items[-1] = "0"
    assert _error_line(_cli("dpo", items, tmp_path)).endswith("logging_steps: must be > 0 with eval_strategy steps, "
                                                              "got 0.0")


def test_logging_steps_is_read_by_the_wandb_watch(monkeypatch):
    """transformers' wandb callback watches every max(100, logging_steps) steps when WANDB_WATCH asks it."""
    from types import SimpleNamespace

    from training.config_checks import _logging_steps_read

    cfg = SimpleNamespace(eval_strategy="no", eval_steps=None, report_to=["wandb"])
    monkeypatch.delenv("WANDB_WATCH", raising=False)
    assert not _logging_steps_read(cfg)
    monkeypatch.setenv("WANDB_WATCH", "gradients")
    assert _logging_steps_read(cfg)
    assert not _logging_steps_read(SimpleNamespace(eval_strategy="no", eval_steps=None, report_to="none"))


def test_a_short_sft_max_length_does_not_ask_for_the_unread_max_prompt_length(tmp_path):
    """SFT under truncation vlrlhf never reads max_prompt_length (refused if given), so its default (128) must
    not block a max_length below it; DPO reads it (answers keep max_length - max_prompt_length) and still
    checks it."""
    res = _cli("sft", ["--max_length", "100"], tmp_path)
    assert res.returncode == 0 and "without effect" not in res.stderr, res.stderr
    assert "max_prompt_length: 128 leaves no room" in _error_line(_cli("dpo", ["--max_length", "100"], tmp_path))
    assert "max_prompt_length: 128 leaves no room" in _error_line(
        _cli("sft", ["--truncation", "per_field", "--max_length", "100"], tmp_path))


def test_a_field_with_two_reasons_is_named_once(tmp_path):
    """eval.gen.temperature in a CSR preset whose evaluation reads no gen (pope only) is also unread under
    greedy decoding: one warning naming it once, under the first reason."""
    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump({"eval": {"tasks": ["pope"], "world": True, "gen": {"temperature": 0.5}}}))
    res = _cli("csr", [], tmp_path, preset)
    assert res.returncode == 0, res.stderr
    warned = [ln for ln in res.stderr.splitlines() if "set but without effect" in ln]
    assert len(warned) == 1 and warned[0].count("eval.gen.temperature") == 1 and "(under eval.tasks pope)" in warned[0]


def test_an_eval_option_of_a_section_the_run_does_not_read_names_the_section(tmp_path):
    """evalsuite run --tasks pope gen.temperature=0.5: the run reads no gen section at all, so the one line
    says that (run_config._check_unused), not "pass gen.do_sample=true" (which would be refused next)."""
    res = cli_inprocess("run", "--ckpt", "c", "--tasks", "pope", "gen.temperature=0.5", "--world", "--dry-run",
                        cwd=tmp_path)
    assert _error_line(res).endswith("command line: gen.temperature: no task of this run reads the gen section "
                                     "(tasks: pope)")
