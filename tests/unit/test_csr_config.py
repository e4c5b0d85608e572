"""CSR presets and config validation: every shipped preset parses, its `train:` keys are trainer
fields, and bad values fail with a UserError naming the field, before any model loads."""
from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path

import pytest

from evalsuite.errors import UserError
from training.csr.config import CSRConfig, TreeConfig, load_config
from training.csr.loop import load_prompts

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("name", ["csr.yaml", "csr_tiny.yaml"])
def test_presets_parse_and_train_keys_are_trainer_fields(name):
    from training.config import TrainConfig

    text = (CONFIGS / name).read_text()
    assert text.startswith("# python ") and "--config configs/" + name in text.splitlines()[0]
    cfg = load_config(CONFIGS / name)
    # + image_aspect: the loop's DPO-stage override of inputs.image_aspect (CSRConfig.train_config)
    known = {f.name for f in fields(TrainConfig)} | {"image_aspect"}
    assert set(cfg.train) <= known, set(cfg.train) - known


def test_paper_preset_values():
    cfg = load_config(CONFIGS / "csr.yaml")
    t = cfg.tree
    assert (t.num_beams, t.num_beam_groups, t.diversity_penalty, t.max_new_tokens) == (5, 5, 3.0, 70)
    assert t.pruning() == (1, 2, 5)
    assert (cfg.reward.mode, cfg.reward.lam, cfg.iterations) == ("rank", 0.9, 3)
    tr = cfg.train
    assert (tr["lora_r"], tr["lora_alpha"], tr["learning_rate"], tr["beta"], tr["num_train_epochs"]) == (128, 256, 1e-7, 0.1, 1)


def test_paper_preset_is_the_released_code():
    """Every fidelity switch of csr.yaml has the released value (docs/csr-fidelity.md), and so do the
    dataclass defaults; csr_tiny keeps our variants."""
    cfg = load_config(CONFIGS / "csr.yaml")
    t = cfg.tree
    released = ("released", None, 1024, None, None, False, "after_pruning")
    assert (t.stop, t.period_id, t.max_chars, t.max_response_tokens, t.max_depth, t.dedupe_siblings, t.junk_filter) == released
    d = TreeConfig()
    assert (d.stop, d.period_id, d.max_chars, d.max_response_tokens, d.max_depth, d.dedupe_siblings, d.junk_filter) == released
    assert cfg.reward.language_score == "beam" and cfg.dtype == "float16"
    assert (t.junk_rules, d.junk_rules, cfg.pairs.tie_order) == ("released", "released", "released")
    assert (cfg.train["warmup_ratio"], cfg.train["merge_dtype"]) == (0.03, "auto") and "max_target_length" not in cfg.train
    tiny = load_config(CONFIGS / "csr_tiny.yaml")
    assert (tiny.tree.stop, tiny.tree.dedupe_siblings, tiny.tree.junk_filter, tiny.reward.language_score) == \
        ("sentence_marks", True, "before_pruning", "teacher_forced")
    assert (tiny.tree.junk_rules, tiny.pairs.tie_order) == ("broad", "node_id")


def test_overrides_and_run_dir():
    cfg = load_config(CONFIGS / "csr_tiny.yaml", ["iterations=1", "tree.max_depth=2", "name=x"])
    assert (cfg.iterations, cfg.tree.max_depth, cfg.run_dir) == (1, 2, Path("runs/x"))


@pytest.mark.parametrize("data,field", [
    ({"tree": {"num_beam_groups": 2}}, "tree.num_beam_groups"),
    ({"tree": {"expander": "greedy"}}, "tree.expander"),
    ({"reward": {"lam": 1.5}}, "reward.lam"),
    ({"reward": {"mode": "paper"}}, "reward.mode"),
    ({"pairs": {"min_paths": 1}}, "pairs.min_paths"),
    ({"iterations": 0}, "csr.iterations"),
    ({"tree": {"beams": 5}}, "unknown key 'tree.beams'"),
    ({"iterations": "3"}, "iterations: expected an int, got the string '3'"),
    ({"train": {"loss_type": "dpoo"}}, "csr.train: loss_type: 'dpoo' is not one of"),
    ({"train": {"lora_rank": 8}}, "csr.train: unknown key 'lora_rank'"),
    ({"model": ""}, "csr.model"),
    ({"dtype": "fp16"}, "dtype: 'fp16' is not one of 'float32', 'float16', 'bfloat16'"),
])
def test_bad_values_name_the_field(data, field):
    base = {"model": "m", "prompts": "p", "image_root": "i", "clip": "c"}
    merged = {**base, **data}
    with pytest.raises(UserError, match=re.escape(field)):
        CSRConfig.from_dict(merged)


def test_pruning_defaults_follow_the_width():
    assert TreeConfig(num_beams=4, num_beam_groups=2).pruning() == (1, 2, 4)
    assert TreeConfig(expander="sample", num_samples=8).pruning() == (3, 4, 8)
    assert TreeConfig(keep_top=0, keep_bottom=1, prune_threshold=2).pruning() == (0, 1, 2)


def test_load_prompts(tmp_path):
    p = tmp_path / "p.json"
    p.write_text(json.dumps([{"id": 7, "image": "a.jpg", "input": "What is this?\n<image>"},
                             {"id": "8", "image": "b.jpg", "question": "Describe."}]))
    assert load_prompts(p) == [{"id": "7", "image": "a.jpg", "question": "What is this?"},
                               {"id": "8", "image": "b.jpg", "question": "Describe."}]
    assert len(load_prompts(p, limit=1)) == 1
    p.write_text('{"id": 1, "image": "a.jpg"}\n')
    with pytest.raises(UserError, match="record 0 needs"):
        load_prompts(p)
    p.write_text('{"id": 1, "image": "a.jpg", "question": "q"}\n{"id": 1, "image": "b.jpg", "question": "q"}\n')
    with pytest.raises(UserError, match="duplicate id"):
        load_prompts(p)


@pytest.mark.parametrize("data, message", [
    ({"tree": {"num_samples": 8}}, "tree.num_samples (under tree.expander group_beam)"),
    ({"tree": {"temperature": 0.7}}, "tree.temperature (under tree.expander group_beam)"),
    ({"tree": {"expander": "sample", "diversity_penalty": 1.0}}, "tree.diversity_penalty (under tree.expander sample)"),
    ({"tree": {"expander": "sample", "num_beams": 5, "num_beam_groups": 5}},
     "tree.num_beams, tree.num_beam_groups (under tree.expander sample)"),
    ({"tree": {"stop": "sentence_marks", "period_id": 9}}, "tree.period_id (under tree.stop sentence_marks)"),
    ({"tree": {"sentence_end": ["."]}}, "tree.sentence_end (under tree.stop released)"),
    ({"reward": {"lm_batch": 8}}, "reward.lm_batch (under reward.language_score beam)"),
])
def test_a_switch_ignored_under_another_setting_names_both(data, message, caplog):
    """A value only the other setting reads would be accepted and ignored: from a mapping (as from a preset)
    one warning naming both fields; from the command line an error (tests/unit/test_unread.py)."""
    base = {"model": "m", "prompts": "p", "image_root": "i", "clip": "c"}
    with caplog.at_level("WARNING", logger="evalsuite.config"):
        CSRConfig.from_dict({**base, **data})
    assert [r.getMessage() for r in caplog.records] == [f"config: set but without effect: {message}"]
    caplog.clear()
    # the same values under the setting that reads them say nothing
    with caplog.at_level("WARNING", logger="evalsuite.config"):
        CSRConfig.from_dict({**base, "tree": {"expander": "sample", "num_samples": 8, "temperature": 0.7}})
        CSRConfig.from_dict({**base, "tree": {"stop": "sentence_marks", "sentence_end": ["."]}})
        CSRConfig.from_dict({**base, "tree": {"period_id": 9}})
    assert not caplog.records


def test_readme_evaluates_csr_checkpoints_with_the_presets_prompt_settings(tmp_path):
    """README step 4: `evalsuite run` on the CSR checkpoints gets configs/csr.yaml's system prompt and
    image_aspect (a model trained under one prompt is measured under the same one), the command parses,
    and the alternative it names (the loop's eval: section) loads with eval.data_root set."""
    import shlex

    import yaml

    from evalsuite.run_config import load_eval_config

    readme = (CONFIGS.parent / "README.md").read_text()
    step = readme[readme.index("# 4. evaluate the base and every iteration"):]
    step = step[: step.index("done")]
    preset = yaml.safe_load((CONFIGS / "csr.yaml").read_text())
    sys_prompt = re.search(r'^SYS="(.*)"$', step, re.M).group(1)
    assert (sys_prompt, preset["inputs"]["image_aspect"]) == (preset["inputs"]["system_prompt"], "pad")
    command = re.search(r"evalsuite run (.*?)\n\s*(--clip.*)\n", step, re.S)
    argv = shlex.split((command.group(1).rstrip("\\ ") + " " + command.group(2)).replace("$ck", str(tmp_path))
                       .replace('"$SYS"', shlex.quote(sys_prompt)).replace("/data/coco", str(tmp_path)))
    cfg, _ = load_eval_config(argv)
    assert (cfg.inputs.system_prompt, cfg.inputs.image_aspect) == (preset["inputs"]["system_prompt"], "pad")
    overrides = shlex.split(re.search(r"adding\n#\s+(.*)\n", step).group(1).replace("/data/coco", str(tmp_path)))
    cfg = load_config(CONFIGS / "csr.yaml", [*overrides, f"model={tmp_path}"])
    assert cfg.eval.tasks == ["chair", "pope", "mme"] and cfg.eval.data_root == str(tmp_path)
    # the loop hands the preset's prompt settings to every evaluation
    ev = cfg.eval_config(tmp_path, "iter_1", tmp_path / "e")
    assert ev.inputs is cfg.inputs and ev.inputs.image_aspect == "pad"  # the object itself


def test_eval_section_without_a_data_root_names_eval_data_root():
    with pytest.raises(UserError, match=re.escape("csr.yaml: eval.data_root: not given (chair needs one)")):
        load_config(CONFIGS / "csr.yaml", ["eval.tasks=[chair]"])


def test_an_evaluated_tasks_required_option_is_refused_before_the_loop(tmp_path):
    """The loop's eval: section goes through the same declaration check as `evalsuite run`, at check_ready
    (before the base evaluation or any stage), naming the key under eval (the loop has no --clip flag)."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "p.json").write_text("[]")
    cfg = load_config(CONFIGS / "csr.yaml", [f"model={tmp_path / 'm'}", f"prompts={tmp_path / 'p.json'}",
                                             f"image_root={tmp_path}", f"clip={tmp_path}", f"eval.data_root={tmp_path}",
                                             "eval.tasks=[caption,relevance]"])
    with pytest.raises(UserError) as e:
        cfg.check_ready()
    assert str(e.value) == ("eval.relevance.clip: not given (task relevance needs it); pass eval.relevance.clip=DIR: "
                            "a local CLIP/SigLIP checkpoint directory")


def test_eval_section_carries_the_judge_of_judged_tasks(tmp_path):
    """The loop's eval: is an evalsuite run config, its judge: section included (the one of `evalsuite
    run`): a preset evaluating mmhal names its judge there, every evaluation gets it, and a bad judge or
    mmhal setting fails at load in one line naming the key under eval."""
    import yaml

    from evalsuite.config import missing_paths
    from evalsuite.judge.config import JudgeConfig

    preset = yaml.safe_load((CONFIGS / "csr.yaml").read_text())
    preset["eval"] = {"tasks": ["mmhal"], "judge": {"url": "http://127.0.0.1:8000/v1", "model": "qwen-judge",
                                                     "max_concurrency": 2, "max_tokens": 256},
                      "mmhal": {"data": str(tmp_path / "response_template.json"), "image_root": str(tmp_path)}}
    path = tmp_path / "csr_mmhal.yaml"
    path.write_text(yaml.safe_dump(preset))
    cfg = load_config(path)
    want = JudgeConfig(model="qwen-judge", url="http://127.0.0.1:8000/v1", max_concurrency=2, max_tokens=256)
    assert cfg.eval.judge == want and cfg.evaluates
    assert not [u for u in cfg.unread() if u[0].startswith(("eval.judge", "eval.mmhal"))]
    ev = cfg.eval_config(tmp_path, "csr/iter_1", tmp_path / "e")
    assert ev.judge == want and ev.tasks == ["mmhal"] and ev.used_sections() >= {"judge", "mmhal"}
    # the template must exist before the loop starts (check_ready lists every missing path)
    assert f"eval.mmhal.data: {tmp_path / 'response_template.json'} (no such file)" in missing_paths(cfg)

    other = CONFIGS / "csr.yaml"
    cases = [
        (path, ["eval.judge.url=ftp://x"], "eval.judge.url: 'ftp://x' is not an http:// or https:// URL"),
        (path, ["eval.judge.max_concurrency=0"], "eval.judge.max_concurrency: must be >= 1, got 0"),
        (path, ["eval.judge.bogus=1"], "unknown key 'eval.judge.bogus'"),
        (path, ["eval.judge.serve_args=[--enforce-eager]"], "eval.judge.serve_args: has no effect with eval.judge.url"),
        (path, ["eval.mmhal.n_boot=-1"], "eval.mmhal.n_boot: must be >= 0, got -1"),
        # a judge no task of eval.tasks reads is refused, not ignored
        (other, ["eval.tasks=[chair]", "eval.data_root=/tmp", "eval.judge.url=http://127.0.0.1:1/v1",
                 "eval.judge.model=j"], "eval.judge.model: has no effect with eval.tasks chair"),
        # one judge section, the evaluation's: none at the top level
        (other, ["judge.url=http://127.0.0.1:1/v1"], "unknown key 'judge'"),
    ]
    for preset_path, overrides, message in cases:
        with pytest.raises(UserError, match=re.escape(message)):
            load_config(preset_path, overrides)
