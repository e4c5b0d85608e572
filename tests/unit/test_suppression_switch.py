"""Token suppression (docs/csr-fidelity.md): the released sampler (inference_csr/sample.py) and
lmms-eval's backends call plain `generate`, banning no token; evalsuite's ban on the image placeholder,
pad and BOS is a named switch, off by default (`tree.suppress_special_tokens`, `gen.suppress_special_tokens`,
lmms `gen_kwargs: suppress_special_tokens=true`) and part of the result's identity."""
from __future__ import annotations

import types

import pytest

from evalsuite.gen_settings import GenConfig
from evalsuite.types import GenRequest


@pytest.fixture(scope="module")
def image_root(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("suppress_images")
    for i in range(8):
        Image.new("RGB", (32, 32), (30 * i, 200 - 20 * i, 60 + 15 * i)).save(root / f"{i}.png")
    return root


def _requests(image_root):
    return [GenRequest(f"d{i}", str(image_root / f"{i}.png"), q) for i in range(8)
            for q in ("Describe the image.", "Is there a cup in the image?")]


def test_eval_generation_is_plain_generate_unless_switched(vlm, image_root):
    """Default: the answers are exactly plain `generate`'s (greedy, nothing banned), and on this random
    tiny model plain generate does emit banned tokens; the switch gives `generate(suppress_tokens=...)`."""
    from evalsuite.models.vlm import encode_batch, generate, suppressed_token_ids

    reqs = _requests(image_root)
    banned = set(suppressed_token_ids(vlm.processor, vlm.model.config, vlm.model.generation_config))
    inputs = encode_batch(vlm, reqs)
    L = inputs["input_ids"].shape[1]
    pad = vlm.tokenizer.pad_token_id
    plain = vlm.model.generate(**inputs, max_new_tokens=12, do_sample=False, num_beams=1, pad_token_id=pad)[:, L:]
    banned_out = vlm.model.generate(**inputs, max_new_tokens=12, do_sample=False, num_beams=1, pad_token_id=pad,
                                    suppress_tokens=sorted(banned))[:, L:]
    text = lambda ids: [t.strip() for t in vlm.tokenizer.batch_decode(ids, skip_special_tokens=True)]
    assert generate(vlm, reqs, GenConfig(max_new_tokens=12), batch_size=16, progress=False) == text(plain)
    on = GenConfig(max_new_tokens=12, suppress_special_tokens=True)
    assert generate(vlm, reqs, on, batch_size=16, progress=False) == text(banned_out)
    eos = vlm.tokenizer.eos_token_id
    before_eos = lambda rows: [set(r[: r.index(eos)] if eos in r else r) & banned for r in rows.tolist()]
    assert any(before_eos(plain)), "the test needs plain generate to emit a banned token somewhere"
    assert not any(before_eos(banned_out))


def test_eval_switch_is_in_the_identity_and_lmms_kwargs(tmp_path):
    from evalsuite.lmms.backend import gen_config
    from evalsuite.run_config import GenOptions, parse_gen_kwargs
    from evalsuite.tasks.coco import answer_identity

    class Ctx:
        def __init__(self):
            self.loader = types.SimpleNamespace(inputs=None)  # default prompt settings

        def model_setup(self):
            return {}

    ident = lambda g: answer_identity(Ctx(), {}, "val", [1], "p", g.config(0))
    assert GenOptions().suppress_special_tokens is False
    assert ident(GenOptions())["gen"]["suppress_special_tokens"] is False
    assert ident(GenOptions(suppress_special_tokens=True))["gen"]["suppress_special_tokens"] is True
    assert gen_config({})[0].suppress_special_tokens is False
    assert gen_config({"suppress_special_tokens": "true"})[0].suppress_special_tokens is True
    assert parse_gen_kwargs("max_new_tokens=4,suppress_special_tokens=true")["suppress_special_tokens"] is True


def test_presets_released_off_demo_on():
    """csr.yaml and the eval preset: released (nothing banned); the demo presets keep the switch on (their
    README numbers were measured with it)."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2] / "configs"
    read = lambda name: yaml.safe_load((root / name).read_text())
    assert read("csr.yaml")["tree"]["suppress_special_tokens"] is False
    assert read("eval/coco.yaml")["gen"]["suppress_special_tokens"] is False
    for name in ("demo.yaml", "demo_tiny.yaml"):
        d = read(name)["csr"]
        assert d["tree"]["suppress_special_tokens"] is True and d["eval"]["gen"]["suppress_special_tokens"] is True
        assert "suppress_special_tokens=true" in d["eval"]["lmms"]["gen_kwargs"]
    assert read("csr_tiny.yaml")["tree"]["suppress_special_tokens"] is True


def test_tree_search_bans_nothing_unless_switched(vlm, image_root):
    """Released default: the search's logits are untouched, so its candidates are HF's without
    `suppress_tokens` (the reference test in test_csr_groupbeam_reference.py); on this model they
    contain banned tokens. The switch bans them."""
    from evalsuite.models.vlm import placeholder_token_ids, suppressed_token_ids
    from training.csr.config import TreeConfig
    from training.csr.generate import TreeGenerator

    banned = set(suppressed_token_ids(vlm.processor, vlm.model.config, vlm.model.generation_config)) - {vlm.tokenizer.eos_token_id}
    placeholders = set(placeholder_token_ids(vlm.processor, vlm.model.config))
    assert placeholders and placeholders < banned
    recs = [{"id": f"p{i}", "image": f"{i}.png", "question": "Describe the image."} for i in range(4)]
    cfg = {"max_new_tokens": 8, "max_depth": 1, "max_chars": None}
    # released: only the image placeholder is banned (a context holding one cannot be fed back; the
    # released LLaVA's vocabulary has none), pad and BOS may be generated
    released = TreeGenerator(vlm, TreeConfig(**cfg), image_root)
    assert set(released.spec.suppress_ids) == placeholders
    ours = TreeGenerator(vlm, TreeConfig(**cfg, suppress_special_tokens=True), image_root)
    assert set(ours.spec.suppress_ids) == banned
    hit = lambda trees: [n.id for t in trees for n in t.nodes if set(n.sentence_ids) & (banned - placeholders)]
    assert hit(released.generate(recs, progress=False))
    assert not hit(ours.generate(recs, progress=False))
