"""evalsuite/identity.py: one canonical digest, one file-hash memo, identities built from option fields."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from evalsuite.identity import (
    EvalIdentity,
    ModelId,
    digest,
    file_sha256,
    gen_identity,
    options_identity,
    prompt_files_id,
)
from evalsuite.lmms.results import leaf_identity
from evalsuite.run_config import load_eval_config
from evalsuite.types import eval_key


def test_digest_ignores_key_order_at_every_level():
    a = {"x": 1, "gen": {"max_new_tokens": 16, "temperature": 0.0}, "ids": [1, 2]}
    b = {"ids": [1, 2], "gen": {"temperature": 0.0, "max_new_tokens": 16}, "x": 1}
    assert digest(a) == digest(b) and len(digest(a)) == 16
    assert digest(a) != digest({**a, "ids": [2, 1]})   # list order is data


def test_eval_key_is_the_eval_identity_key_and_unchanged_for_existing_identities():
    """types.eval_key keeps its algorithm (sha256 of sorted compact JSON): a hand-computed key."""
    import hashlib

    ident = {"split": "val", "seed": 0}
    text = '{"identity":{"seed":0,"split":"val"},"task":"caption","version":"1"}'
    assert eval_key("caption", "1", ident) == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert EvalIdentity("caption", "1", ident).key() == eval_key("caption", "1", ident)


def test_gen_settings_in_any_order_give_one_eval_key():
    """lmms.gen_kwargs typed on the command line in two orders, or as a mapping: one identity, one key."""
    base = ["--ckpt", "CK", "--tasks", "pope", "--data-root", "W", "--gen-kwargs"]
    typed = [load_eval_config([*base, text])[0].lmms.gen_kwargs
             for text in ("max_new_tokens=16,temperature=0", "temperature=0,max_new_tokens=16")]
    forms = [*typed, "temperature=0.0,max_new_tokens=16", {"temperature": 0, "max_new_tokens": 16}]
    keys = {eval_key("pope", "0.0", leaf_identity("pope", "d", limit=None, gen_kwargs=g, inputs=None,
                                                   setup={"seed": 0})) for g in forms}
    assert len(keys) == 1
    ident = leaf_identity("pope", "d", limit=None, gen_kwargs=forms[0], inputs=None, setup={})
    assert ident["gen_kwargs"] == {"max_new_tokens": 16, "temperature": 0.0}   # typed, never the text
    assert gen_identity(None) is None


def test_options_enter_identity_unless_marked_otherwise():
    """A new option is part of the identity by default; `identity: False` keeps it out; sections nest."""

    @dataclass
    class Inner:
        depth: int = 2
        workers: int = field(default=4, metadata={"identity": False})

    @dataclass
    class Opts:
        tokenizer: str = "nltk"
        n_boot: int = field(default=1000, metadata={"identity": False})
        inner: Inner = field(default_factory=Inner)

    assert options_identity(Opts()) == {"tokenizer": "nltk", "inner": {"depth": 2}}
    assert options_identity(Opts(n_boot=5)) == options_identity(Opts())
    assert options_identity(Opts(tokenizer="spacy")) != options_identity(Opts())


def test_file_hash_follows_an_edit(tmp_path):
    p = tmp_path / "chat_template.jinja"
    p.write_text("{{ a }}")
    before = file_sha256(p)
    p.write_text("{{ b }}")
    os.utime(p, ns=(1, 2))   # another mtime, whatever the clock's resolution
    assert file_sha256(p) != before


def test_model_id_covers_the_prompt_files(tmp_path):
    """The weights' hash alone does not change when the chat template does; the ModelId's key does."""
    ckpt = tmp_path / "ck"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"weights")
    (ckpt / "chat_template.jinja").write_text("{{ messages }}")
    (ckpt / "evalsuite.json").write_text("{}")
    a = ModelId.of(ckpt, None, "cpu", "float32")
    (ckpt / "evalsuite.json").write_text('{"iteration": 1}')   # metadata no model reads: same model
    os.utime(ckpt / "evalsuite.json", ns=(1, 3))
    assert ModelId.of(ckpt, None, "cpu", "float32") == a
    (ckpt / "chat_template.jinja").write_text("SYSTEM {{ messages }}")
    os.utime(ckpt / "chat_template.jinja", ns=(1, 4))
    b = ModelId.of(ckpt, None, "cpu", "float32")
    assert b.weights == a.weights and b.prompt_files != a.prompt_files and b.key() != a.key()
    assert prompt_files_id(ckpt) == b.prompt_files
    assert ModelId.of(ckpt, None, "cpu", "bfloat16").key() != b.key()


def test_chair_n_boot_changes_no_eval_key(tiny_clip_dir, world_dir, punkt_dir, tmp_path):
    """Two chair plans differing only in chair.n_boot share one eval_key, and so do the relevance plans
    scoring their answers; chair.n_images still changes it."""
    from evalsuite.gen_settings import GenConfig
    from evalsuite.tasks.base import RunContext
    from evalsuite.tasks.registry import load_task

    ctx = RunContext(ckpt=str(tmp_path), data_root=Path(world_dir), gen=GenConfig(max_new_tokens=8))
    chair, relevance = load_task("chair"), load_task("relevance")

    def plans(**opts):
        c = chair.plan(ctx, chair.Options(cache_dir=str(tmp_path / "gt"), nltk_data=str(punkt_dir), **opts), {})
        r = relevance.plan(ctx, relevance.Options(clip=str(tiny_clip_dir), source="chair"), {"chair": c})
        return c, r

    (c1, r1), (c2, r2) = plans(n_boot=10), plans(n_boot=500)
    assert c1.eval_key == c2.eval_key and r1.eval_key == r2.eval_key
    assert (c1.config["n_boot"], c2.config["n_boot"]) == (10, 500)   # still recorded in the config
    assert plans(n_boot=10, n_images=7)[0].eval_key != c1.eval_key
