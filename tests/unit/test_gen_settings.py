"""Generation settings are declared once (evalsuite/gen_settings.py): the eval `gen:` section, the CSR `tree:`
section and the search spec inherit the shared fields' type, range and help, keep their own defaults and
keys, and the identities built from them are those of the code before the shared type."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from evalsuite.config import help_lines, load
from evalsuite.errors import UserError
from evalsuite.gen_settings import GenConfig, GenOptions, GenSettings, GroupBeamSettings, own_defaults, shared
from evalsuite.run_config import EvalConfig, load_eval_config
from training.csr.config import CSRConfig, TreeConfig, load_config
from training.csr.search import SearchSpec

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SHARED = [f.name for f in dataclasses.fields(GenSettings)]
BEAM = [f.name for f in dataclasses.fields(GroupBeamSettings)]


@pytest.mark.parametrize("cls", [GenOptions, GenConfig, TreeConfig, SearchSpec])
def test_every_generator_takes_the_shared_declaration(cls):
    assert issubclass(cls, GenSettings)
    base = {f.name: f for f in dataclasses.fields(GroupBeamSettings if issubclass(cls, GroupBeamSettings)
                                                  else GenSettings)}
    mine = {f.name: f for f in dataclasses.fields(cls)}
    for name, f in base.items():
        for key in ("ge", "gt", "le", "lt"):
            assert mine[name].metadata.get(key) == f.metadata.get(key), (cls.__name__, name, key)
        assert f.metadata["help"] in mine[name].metadata["help"], (cls.__name__, name)
        assert mine[name].type == f.type


def test_each_keeps_its_own_defaults():
    assert (GenOptions().max_new_tokens, GenOptions().num_beams) == (512, 1)
    assert GenConfig.max_new_tokens == 512   # the lmms backend's fallback reads the class attribute
    tree = TreeConfig()
    assert (tree.max_new_tokens, tree.num_beams, tree.num_beam_groups, tree.diversity_penalty) == (70, 5, 5, 3.0)
    assert (SearchSpec().max_new_tokens, SearchSpec().num_beams, SearchSpec().num_beam_groups) == (70, 5, 5)


def test_tree_keys_and_overrides_still_work():
    cfg = load_config(CONFIGS / "csr.yaml", ["tree.max_new_tokens=12", "tree.expander=sample",
                                             "tree.temperature=0.5", "tree.top_p=0.9"])
    assert (cfg.tree.max_new_tokens, cfg.tree.temperature, cfg.tree.top_p) == (12, 0.5, 0.9)
    with pytest.raises(UserError, match=r"^command line: tree\.top_p: must be in \(0, 1\], got 0\.0$"):
        load_config(CONFIGS / "csr.yaml", ["tree.top_p=0"])
    with pytest.raises(UserError, match=r"tree\.num_beam_groups: must divide num_beams \(4\)"):
        load_config(CONFIGS / "csr.yaml", ["tree.num_beams=4", "tree.num_beam_groups=3"])


def test_eval_keys_flags_and_ranges_still_work():
    cfg, _ = load_eval_config(["--ckpt", "x", "--tasks", "caption", "--world", "--max-new-tokens", "9",
                               "gen.do_sample=true", "gen.temperature=0.5"])
    gen = cfg.gen_config()
    assert isinstance(gen, GenConfig)
    assert (gen.max_new_tokens, gen.do_sample, gen.temperature, gen.seed) == (9, True, 0.5, 0)
    assert gen.as_kwargs() == {"max_new_tokens": 9, "do_sample": True, "num_beams": 1, "temperature": 0.5, "top_p": 1.0}
    with pytest.raises(UserError, match=r"--max-new-tokens: gen\.max_new_tokens: must be >= 1, got 0"):
        load_eval_config(["--ckpt", "x", "--tasks", "caption", "--world", "--max-new-tokens", "0"])
    with pytest.raises(UserError, match=r"gen\.top_p: must be in \(0, 1\], got 2"):
        GenConfig(top_p=2)


def test_the_search_spec_takes_the_tree_settings():
    tree = TreeConfig(num_beams=4, num_beam_groups=2, diversity_penalty=1.5, length_penalty=0.5,
                      max_new_tokens=9, temperature=0.7, top_p=0.8)
    spec = SearchSpec(**shared(tree, GroupBeamSettings), stop_ids=(3,), pad_id=0)
    assert {n: getattr(spec, n) for n in BEAM} == {n: getattr(tree, n) for n in BEAM}
    assert set(BEAM) == {*SHARED, "num_beam_groups", "diversity_penalty", "length_penalty"}
    with pytest.raises(UserError, match="num_beam_groups: must divide num_beams"):
        SearchSpec(num_beams=3)


@pytest.mark.parametrize("cls, prefix", [(EvalConfig, "gen."), (CSRConfig, "tree.")])
def test_help_shows_each_field_once(cls, prefix):
    lines = help_lines(cls)
    for name in SHARED:
        assert sum(line.split()[0] == prefix + name for line in lines) == 1, name
    temperature = next(line for line in lines if line.split()[0] == prefix + "temperature")
    assert ("(read only with do_sample)" if prefix == "gen." else "sample: sampling temperature") in temperature


def test_own_defaults_names_only_inherited_fields():
    with pytest.raises(TypeError, match="'beams' is not an inherited field"):
        @dataclasses.dataclass(frozen=True)
        @own_defaults(beams=3)
        class Wrong(GenSettings):
            pass


# identities computed with the code before the shared type (main at 8ec3b47): unchanged settings, same keys
@pytest.mark.parametrize("kw, key", [
    ({}, "b6e0c648d99d4409"),
    (dict(expander="sample", temperature=0.7, top_p=0.9, num_samples=4, max_new_tokens=30), "e4bc830a8a3282f3"),
    (dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.5, length_penalty=0.5), "6670aab10949d71d"),
])
def test_tree_identity_is_unchanged(kw, key):
    from evalsuite.identity import digest
    from training.csr.stages import tree_identity

    assert digest(tree_identity(TreeConfig(**kw))) == key


def test_eval_generation_identity_is_unchanged():
    from evalsuite.identity import digest, gen_identity

    assert digest(gen_identity(EvalConfig().gen_config())) == "c9909e9f5018e96d"
    cfg = load(EvalConfig, None, ["ckpt=x", "tasks=[caption]", "world=true", "gen.do_sample=true",
                                  "gen.temperature=0.5", "gen.top_p=0.8", "gen.max_new_tokens=64", "seed=3"])
    assert digest(gen_identity(cfg.gen_config())) == "14e641c2acc1dadf"


def test_the_tree_rules_hand_the_sampling_settings_to_the_search(vlm, tmp_path):
    """tree.temperature / tree.top_p reach the sampling expander through the spec: near-zero temperature or
    top_p draws the most likely sentence every time, the default draws different ones."""
    from PIL import Image

    from evalsuite.models.vlm import build_prompt, load_image
    from training.csr.rules import TreeRules
    from training.csr.search import sample_search

    Image.new("RGB", (32, 32), (40, 200, 90)).save(tmp_path / "0.png")
    enc = vlm.processor(images=[load_image(tmp_path / "0.png")], text=[build_prompt(vlm, "Describe the image.")],
                        return_tensors="pt")

    def draws(**kw):
        tree = TreeConfig(expander="sample", num_samples=8, max_new_tokens=12, stop="sentence_marks", **kw)
        spec = TreeRules(vlm, tree, tmp_path).spec
        assert {n: getattr(spec, n) for n in BEAM} == {n: getattr(tree, n) for n in BEAM}
        out = sample_search(vlm.model, [enc["input_ids"][0].tolist()], enc["pixel_values"], spec, 8, ["k"], seed=3)
        return {h.ids for h in out[0]}

    assert len(draws()) > 1
    assert len(draws(temperature=1e-4)) == 1
    assert len(draws(top_p=1e-4)) == 1
