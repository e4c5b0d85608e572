"""The eval config (evalsuite/run_config.py): typed sections, convenience flags, gen kwargs, the CSR fragment."""
from __future__ import annotations

from pathlib import Path

import pytest

from evalsuite.errors import UserError
from evalsuite.run_config import EvalConfig, load_eval_config, parse_gen_kwargs

REPO = Path(__file__).resolve().parents[2]
BASE = ["--ckpt", "CK", "--data-root", "W"]


def _cfg(*argv) -> EvalConfig:
    return load_eval_config([*BASE, *argv])[0]


def test_gen_kwargs_are_typed():
    """ints stay ints, 0 for a float field becomes 0.0, booleans and stop strings pass, a mapping works too."""
    assert parse_gen_kwargs("max_new_tokens=16,temperature=0") == {"max_new_tokens": 16, "temperature": 0.0}
    assert parse_gen_kwargs({"do_sample": True, "until": "."}) == {"do_sample": True, "until": "."}
    assert parse_gen_kwargs(None) == {}
    for bad, msg in (("max_new_tokens=0", "max_new_tokens: must be >= 1"), ("top_p=2", "top_p: must be in (0, 1], got 2"),
                     ("num_beams=1.5", "num_beams=1.5: expected int"), ("do_sample=3", "expected bool"),
                     ("max_new_tokens=4,", "'' is not key=value")):
        with pytest.raises(UserError, match=msg.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            parse_gen_kwargs(bad)
    cfg = _cfg("--tasks", "pope", "--gen-kwargs", "max_new_tokens=4,temperature=0")
    assert cfg.lmms.gen_kwargs_arg() == "max_new_tokens=4,temperature=0.0"


def test_convenience_flags_set_the_sections_the_run_reads():
    """--split reaches caption, chair and lmms when the run has them; only the sections in use; in order."""
    cfg = _cfg("--tasks", "caption,pope", "--split", "val2014", "--prompt", "Describe.")
    assert (cfg.caption.split, cfg.lmms.split, cfg.chair.split) == ("val2014", "val2014", "val")
    assert (cfg.caption.prompt, cfg.chair.prompt) == ("Describe.", "Please describe this image in detail.")
    assert _cfg("--tasks", "chair", "chair.split=a", "--split", "b").chair.split == "b"
    assert _cfg("--tasks", "chair", "--split", "b", "chair.split=a").chair.split == "a"
    # relevance reads the answers of the task its `requires` names: that task's section counts as used
    cfg = _cfg("--tasks", "relevance", "relevance.source=chair", "--clip", "C", "--chair-images", "7",
               "--max-new-tokens", "9", "--split", "s")
    assert (cfg.relevance.clip, cfg.chair.n_images, cfg.gen.max_new_tokens) == ("C", 7, 9)
    assert (cfg.chair.split, cfg.caption.split) == ("s", "val")
    cfg = _cfg("--tasks", "relevance", "--clip", "C", "--prompt", "P")   # caption by default
    assert (cfg.caption.prompt, cfg.chair.prompt) == ("P", "Please describe this image in detail.")
    with pytest.raises(UserError, match=r"^--chair-images: sets chair.n_images, which no task of this run reads"):
        _cfg("--tasks", "relevance", "--clip", "C", "--chair-images", "7")
    with pytest.raises(UserError, match=r"^--max-new-tokens: sets gen.max_new_tokens, which no task"):
        _cfg("--tasks", "pope", "--max-new-tokens", "9")


def test_lmms_with_mapped_data_needs_no_data_root():
    cfg = load_eval_config(["--ckpt", "CK", "--tasks", "mme", "lmms.data.mme=/d/mme.parquet"])[0]
    assert cfg.lmms.data == {"mme": ["/d/mme.parquet"]} and cfg.data_root is None
    with pytest.raises(UserError, match=r"data_root: not given \(mme needs one\)"):
        load_eval_config(["--ckpt", "CK", "--tasks", "mme"])
    with pytest.raises(UserError, match=r"^ckpt: required"):
        load_eval_config(["--tasks", "caption", "--world"])


def test_resolved_config_round_trips():
    import yaml

    from evalsuite.config import build, to_yaml

    cfg = _cfg("--tasks", "chair,pope", "chair.n_boot=5", "--gen-kwargs", "max_new_tokens=3")
    assert build(EvalConfig, yaml.safe_load(to_yaml(cfg))) == cfg


def test_output_dir_differences():
    from evalsuite.outdir import differences

    old = {"limit": 2, "chair": {"n_images": 5, "seed": None}, "tasks": ["a"]}
    assert differences(old, {"limit": 2, "chair": {"n_images": 6, "seed": None}, "tasks": ["a", "b"]}) == \
        ["chair.n_images", "tasks"]
    assert differences(old, dict(old)) == []


def _csr(*overrides):
    from training.csr.config import load_config

    return load_config(REPO / "configs" / "csr_tiny.yaml", list(overrides))


def test_csr_eval_section_is_an_eval_config_checked_at_load():
    cfg = _csr("eval.tasks=[caption, chair]", "eval.data_root=W", "eval.chair.n_images=4", "eval.limit=2")
    ev = cfg.eval_config("CK1", "csr_tiny/iter_1", Path("out/iter_1/eval"))
    assert (ev.ckpt, ev.output, ev.label, ev.store, ev.device) == \
        ("CK1", "out/iter_1/eval", "csr_tiny/iter_1", cfg.store, "cpu")
    assert (ev.chair.n_images, ev.limit) == (4, 2) and cfg.evaluates
    assert not _csr().evaluates
    for bad, msg in (("eval.chair.n_imagez=3", "unknown key 'eval.chair.n_imagez'"),
                     ("eval.ckpt=X", "eval.ckpt: is set by the loop"),
                     ("eval.limit=0", "limit: must be >= 1, got 0")):
        with pytest.raises(UserError, match=msg):
            _csr("eval.tasks=[caption]", "eval.data_root=W", bad)
    with pytest.raises(UserError, match="data_root: not given"):
        _csr("eval.tasks=[caption]")


def test_help_lists_every_field_with_its_help_and_every_flag():
    """`evalsuite run --help` is generated from EvalConfig: every field (sections as section.key) with
    its help text, every convenience flag and the entry point's own flags."""
    from evalsuite.commands.run import epilog
    from evalsuite.config import config_fields
    from evalsuite.run_config import aliases

    text = epilog()
    for key, f, sub in config_fields(EvalConfig):
        shown = key if "." in key or sub is not None else "--" + key.replace("_", "-")
        assert f.metadata["help"] and any(line.split()[0].rstrip(":") == shown and f.metadata["help"] in line
                                          for line in text.splitlines()), key
    for name in [*aliases(), "config", "dry_run"]:
        assert f"--{name.replace('_', '-')}" in text, name


@pytest.mark.parametrize("flag", ["--store", "--output"])
def test_empty_store_or_output_is_one_line_naming_the_flag(flag, tmp_path, capsys):
    """`--store ''` would write into the working directory and `--output ''` would silently mean the
    default: both are exit 2 before anything is read, one line naming the flag."""
    from evalsuite.cli import main as cli_main

    argv = ["run", "--ckpt", str(tmp_path), "--tasks", "caption", "--world", flag, ""]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == f"evalsuite: error: command line: {flag}: empty path; give a directory", err


def test_dtype_is_checked():
    assert load_eval_config(["--ckpt", "x", "--tasks", "mme", "--world", "--dtype", "bfloat16"])[0].dtype == "bfloat16"
    with pytest.raises(UserError, match="dtype"):
        load_eval_config(["--ckpt", "x", "--tasks", "mme", "--world", "--dtype", "int8"])
