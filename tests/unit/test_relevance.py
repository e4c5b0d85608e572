"""CLIP relevance: the pure math by hand, and the scorer against the tiny CLIP's own embeddings."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from evalsuite.errors import UserError
from evalsuite.metrics import relevance as rel

TEXTS = ["a red cube.", "a blue ball on the left", "the green cone is small", "there is a dog",
         "two cat", "sky", "grass and a cube", "big big ball"]


@pytest.fixture(scope="module")
def clip_dir(tiny_clip_dir):
    return tiny_clip_dir


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    from PIL import Image

    d = tmp_path_factory.mktemp("img")
    rng = np.random.default_rng(0)
    arrays = [np.full((30, 40, 3), (200, 10, 10), np.uint8),                      # solid red
              np.tile(np.linspace(0, 255, 32, dtype=np.uint8)[None, :, None], (32, 1, 3)),  # grey ramp
              rng.integers(0, 256, size=(48, 64, 3), dtype=np.uint8)]               # noise
    paths = []
    for i, arr in enumerate(arrays):
        paths.append(d / f"im{i}.png")
        Image.fromarray(arr).save(paths[-1])
    return paths


@pytest.fixture(scope="module")
def scorer(clip_dir):
    return rel.RelevanceScorer(clip_dir, device="cpu", batch_size=4)


# ---------------------------------------------------------------- pure math
def test_math_by_hand():
    """img (3,4), text (4,3): cos = 24/25 = 0.96, R at scale 100 = 96; text (-4,-3): cos -0.96, R = 0."""
    cos = rel.cosines(np.array([[3.0, 4.0], [3.0, 4.0]]), np.array([[4.0, 3.0], [-8.0, -6.0]]))
    np.testing.assert_allclose(cos, [0.96, -0.96])
    np.testing.assert_allclose(rel.relevance_from_cosine(cos, 100.0), [96.0, 0.0])


def test_sentence_mean_and_describe():
    """mean of [] is the documented 0.0; [1,2,3,4]: mean 2.5, median 2.5, std sqrt(1.25) = 1.1180340."""
    assert rel.sentence_mean([]) == 0.0
    assert rel.sentence_mean([1.0, 2.0]) == 1.5
    d = rel.describe([4.0, 1.0, 3.0, 2.0])
    assert d == pytest.approx({"n": 4, "mean": 2.5, "median": 2.5, "std": 1.118033988749895})


# ---------------------------------------------------------------- scorer vs the model itself
def _by_hand(clip_dir, image_path, texts):
    """CSR's own formula: logits_per_image of CLIPModel(**processor(text, images)), and the explicit
    normalise / dot / x exp(logit_scale) / clamp-at-0 from get_*_features."""
    import torch
    from PIL import Image
    from transformers import AutoProcessor, CLIPModel

    model = CLIPModel.from_pretrained(clip_dir, local_files_only=True).eval()
    proc = AutoProcessor.from_pretrained(clip_dir, local_files_only=True)
    inputs = proc(text=texts, images=Image.open(image_path).convert("RGB"), return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**inputs).logits_per_image[0].numpy()
        img = model.get_image_features(pixel_values=inputs["pixel_values"]).pooler_output[0].numpy()
        txt = model.get_text_features(input_ids=inputs["input_ids"],
                                      attention_mask=inputs["attention_mask"]).pooler_output.numpy()
        scale = model.logit_scale.exp().item()
    cos = (txt / np.linalg.norm(txt, axis=1, keepdims=True)) @ (img / np.linalg.norm(img))
    return np.maximum(scale * cos, 0.0), cos, logits


def test_scores_equal_hand_computation(clip_dir, scorer, images):
    all_cos, all_scores = [], []
    for image in images:
        scores, cos = scorer.score_texts([(image, t) for t in TEXTS])
        want, want_cos, logits = _by_hand(clip_dir, image, TEXTS)
        np.testing.assert_allclose(cos, want_cos, atol=1e-6)
        np.testing.assert_allclose(scores, want, atol=1e-5)
        np.testing.assert_allclose(scores, np.maximum(logits, 0.0), atol=1e-5)
        all_cos.append(cos)
        all_scores.append(scores)
    cos, scores = np.concatenate(all_cos), np.concatenate(all_scores)
    # the set holds both signs, so the clamp is exercised: negative cosine kept raw, R clamped to 0
    assert (cos < 0).any() and (cos > 0).any()
    assert np.all(scores[cos < 0] == 0.0) and np.all(scores[cos > 0] > 0.0)


def test_response_scores_sentences_and_whole(scorer, images):
    r = scorer.score_response(images[1], "a red cube. there is a dog!  sky")
    assert r.sentences == ["a red cube.", "there is a dog!", "sky"]
    s, c = scorer.score_texts([(images[1], t) for t in r.sentences + [" ".join(r.sentences)]])
    np.testing.assert_allclose(r.sentence_scores, s[:3], atol=1e-6)
    np.testing.assert_allclose(r.sentence_cosines, c[:3], atol=1e-6)
    assert r.mean == pytest.approx(float(np.mean(s[:3])), abs=1e-6) and r.score == r.mean
    assert r.whole == pytest.approx(s[3], abs=1e-6) and r.whole_cosine == pytest.approx(c[3], abs=1e-6)


def test_empty_text_scores_zero(scorer, images):
    for text in ["", "   \n", "..."]:
        r = scorer.score_response(images[0], text)
        assert (r.sentences, r.mean, r.whole, r.whole_cosine) == ([], 0.0, 0.0, None)


# ---------------------------------------------------------------- cache and batching change nothing
def test_cache_encodes_each_image_once_and_changes_no_score(clip_dir, images):
    items = [(im, t) for im in images for t in TEXTS]
    cached = rel.RelevanceScorer(clip_dir, device="cpu", batch_size=5)
    plain = rel.RelevanceScorer(clip_dir, device="cpu", batch_size=5, cache_images=False)
    s1, c1 = cached.score_texts(items)
    s2, c2 = plain.score_texts(items)
    np.testing.assert_allclose(s1, s2, atol=1e-6)
    np.testing.assert_allclose(c1, c2, atol=1e-7)
    assert cached.stats["image_encodes"] == len(images)
    assert plain.stats["image_encodes"] == len(items)
    s3, _ = cached.score_texts(items)   # second pass: all hits, same scores
    assert cached.stats["image_encodes"] == len(images) and cached.stats["cache_hits"] == len(images)
    np.testing.assert_array_equal(s1, s3)


def test_cache_is_keyed_by_content(scorer, images, tmp_path):
    """A renamed copy hits the cache; a file rewritten in place with other pixels does not."""
    from PIL import Image

    scorer.score_texts([(images[2], "sky")])
    before = scorer.stats["image_encodes"]
    copy = tmp_path / "copy.png"
    shutil.copy(images[2], copy)
    scorer.score_texts([(copy, "sky")])
    assert scorer.stats["image_encodes"] == before
    Image.new("RGB", (32, 32), (1, 2, 3)).save(copy)
    scorer.score_texts([(copy, "sky")])
    assert scorer.stats["image_encodes"] == before + 1


def test_batch_size_changes_no_score(clip_dir, images):
    items = [(im, t) for im in images for t in TEXTS]
    results = [rel.RelevanceScorer(clip_dir, device="cpu", batch_size=b).score_texts(items)[0] for b in (1, 3, 64)]
    for other in results[1:]:
        assert np.max(np.abs(other - results[0])) <= 1e-5


def test_long_text_truncated_with_eos_kept(scorer, images):
    """CLIP pools at the EOS position, so truncation must keep </s> as the last token (max 32 here)."""
    long = " ".join(["a red cube on the left"] * 20)
    enc = scorer.tokenizer([long], truncation=True, max_length=scorer.max_text_length)
    assert scorer.max_text_length == 32
    assert len(enc["input_ids"][0]) == 32 and enc["input_ids"][0][-1] == scorer.tokenizer.eos_token_id
    s, _ = scorer.score_texts([(images[0], long)])
    assert np.isfinite(s[0])


# ---------------------------------------------------------------- errors
def test_missing_and_unreadable_images_name_the_path(scorer, tmp_path):
    missing = tmp_path / "nope.png"
    with pytest.raises(UserError, match="nope.png: image not found"):
        scorer.score_response(missing, "a cube")
    bad = tmp_path / "bad.png"
    bad.write_text("not a png")
    with pytest.raises(UserError, match="bad.png: image unreadable"):
        scorer.score_response(bad, "a cube")
    with pytest.raises(UserError, match="nope.png"):   # checked even when the text is empty
        scorer.score_response(missing, "")


def test_non_clip_checkpoints_are_refused(clip_dir, tmp_path):
    (tmp_path / "llava").mkdir()
    (tmp_path / "llava" / "config.json").write_text(json.dumps({"model_type": "llava"}))
    with pytest.raises(UserError, match="model_type 'llava' is not a CLIP-family model"):
        rel.RelevanceScorer(tmp_path / "llava")
    with pytest.raises(UserError, match="config.json: missing"):
        rel.RelevanceScorer(tmp_path)
    with pytest.raises(UserError, match="not a directory"):
        rel.RelevanceScorer(tmp_path / "absent")
    nobin = tmp_path / "nobin"
    nobin.mkdir()
    shutil.copy(clip_dir / "config.json", nobin / "config.json")
    with pytest.raises(UserError, match="safetensors"):
        rel.RelevanceScorer(nobin)


def test_siglip_checkpoint_scores_scaled_cosine(clip_dir, images, tmp_path):
    """A tiny SiglipModel (the kit's tokenizer and image processor): R = max(exp(logit_scale) * cos, 0),
    i.e. SigLIP's own logits_per_image minus its logit_bias, clamped; texts padded to the full length."""
    import torch
    from PIL import Image
    from transformers import AutoProcessor, SiglipConfig, SiglipModel

    proc = AutoProcessor.from_pretrained(clip_dir, local_files_only=True)
    tok = proc.tokenizer
    torch.manual_seed(0)
    cfg = SiglipConfig(
        text_config={"vocab_size": len(tok), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                     "num_attention_heads": 2, "max_position_embeddings": 32, "pad_token_id": tok.pad_token_id,
                     "eos_token_id": tok.eos_token_id},
        vision_config={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                       "num_attention_heads": 2, "image_size": 32, "patch_size": 4},
    )
    SiglipModel(cfg).eval().save_pretrained(tmp_path / "siglip", safe_serialization=True)
    proc.save_pretrained(tmp_path / "siglip")
    scorer = rel.RelevanceScorer(tmp_path / "siglip", device="cpu", batch_size=3)
    assert scorer.family == "siglip" and scorer.max_text_length == 32
    scores, cos = scorer.score_texts([(images[0], t) for t in TEXTS])
    model = SiglipModel.from_pretrained(tmp_path / "siglip", local_files_only=True).eval()
    inputs = proc(text=TEXTS, images=Image.open(images[0]).convert("RGB"), return_tensors="pt",
                  padding="max_length", max_length=32, truncation=True)
    with torch.no_grad():
        logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                       pixel_values=inputs["pixel_values"]).logits_per_image[0].numpy()
    np.testing.assert_allclose(scores, np.maximum(logits - model.logit_bias.item(), 0.0), atol=1e-5)
    np.testing.assert_allclose(scores, np.maximum(cos * model.logit_scale.exp().item(), 0.0), atol=1e-5)
