"""Image-response relevance: the CLIP score CSR uses as its visual reward (docs/csr-method.md §3).

    R(image, text) = max(s * cos(f_image, f_text), 0),   s = exp(logit_scale) (~100 for OpenAI CLIP)

The raw cosine is kept next to R. A response is scored two ways, both recorded:
  * `sentence_mean` (THE response score, `RESPONSE_SCORE`): the mean of R over the response's sentences
    (`evalsuite.text.split_sentences`), as CSR scores each new sentence on its own. It also avoids the
    77-token CLIP truncation that silently drops the tail of a long whole response;
  * `whole`: R of the whole response as one (truncated) text.
Empty text (no sentence) scores 0.0 with cosine None: there is nothing to relate to the image.
SigLIP checkpoints use the same formula; their logit_bias is left out because R is a scaled cosine.

Usage:
    scorer = RelevanceScorer("/models/clip-vit-large-patch14-336")
    scorer.score_response("img.jpg", "A cat sits. A dog runs.").mean
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evalsuite.errors import UserError
from evalsuite.text import split_sentences

log = logging.getLogger(__name__)

RESPONSE_SCORE = "sentence_mean"
CLIP_FAMILIES = {"clip": "CLIPModel", "siglip": "SiglipModel"}


# ---------------------------------------------------------------- pure math (hand-checkable)
def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Each row divided by its L2 norm."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def cosines(image_embs: np.ndarray, text_embs: np.ndarray) -> np.ndarray:
    """Row-wise cosine of paired (n, d) image and text embeddings (raw, unnormalised inputs)."""
    return np.sum(normalize_rows(image_embs) * normalize_rows(text_embs), axis=-1)


def relevance_from_cosine(cos: np.ndarray | float, scale: float) -> np.ndarray:
    """R = max(scale * cos, 0), elementwise."""
    return np.maximum(scale * np.asarray(cos, dtype=np.float64), 0.0)


def sentence_mean(scores: Sequence[float]) -> float:
    """Mean of per-sentence scores; a response with no sentence scores 0.0 (documented above)."""
    return float(np.mean(scores)) if len(scores) else 0.0


def describe(values: Sequence[float]) -> dict:
    """n, mean, median and population std (ddof=0, defined for n=1) of a score set."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {"n": 0, "mean": float("nan"), "median": float("nan"), "std": float("nan")}
    return {"n": int(v.size), "mean": float(v.mean()), "median": float(np.median(v)), "std": float(v.std())}


@dataclass
class ResponseScore:
    """Scores of one response against one image."""

    sentences: list[str]
    sentence_scores: list[float]
    sentence_cosines: list[float]
    whole: float
    whole_cosine: float | None
    mean: float = field(init=False)   # sentence_mean: THE response score

    def __post_init__(self) -> None:
        self.mean = sentence_mean(self.sentence_scores)

    @property
    def score(self) -> float:
        """THE response score (`RESPONSE_SCORE` names it in every result)."""
        return self.mean

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------- loading
def clip_family(clip_dir: Path) -> str:
    """The model family ("clip" | "siglip") of a local checkpoint dir; UserError for anything else."""
    cfg_path = clip_dir / "config.json"
    if not clip_dir.is_dir():
        raise UserError(f"--clip {clip_dir}: not a directory")
    if not cfg_path.is_file():
        raise UserError(f"{cfg_path}: missing; --clip must be a local CLIP/SigLIP checkpoint directory")
    try:
        model_type = json.loads(cfg_path.read_text()).get("model_type")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{cfg_path}: not valid json ({e})") from None
    if model_type not in CLIP_FAMILIES:
        raise UserError(
            f"{cfg_path}: model_type {model_type!r} is not a CLIP-family model (expected one of {sorted(CLIP_FAMILIES)})"
        )
    if not any(clip_dir.glob("*.safetensors")):
        raise UserError(f"{clip_dir}: no *.safetensors weights (evalsuite loads safetensors only)")
    return model_type


def load_clip(clip_dir: str | Path, device: str | None = None, dtype: Any = None):
    """(model, tokenizer, image_processor, family) from a local dir; no hub access, no remote code."""
    import torch
    import transformers
    from transformers import AutoProcessor

    clip_dir = Path(clip_dir)
    family = clip_family(clip_dir)
    model_cls = getattr(transformers, CLIP_FAMILIES[family])
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or torch.float32
    model = model_cls.from_pretrained(clip_dir, local_files_only=True, use_safetensors=True, dtype=dtype)
    model = model.to(device).eval()
    processor = AutoProcessor.from_pretrained(clip_dir, local_files_only=True)
    return model, processor.tokenizer, processor.image_processor, family


# ---------------------------------------------------------------- images
def _image_bytes_key(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _load_image(ref: Any):
    """(content key, PIL RGB image) of a path or PIL image; UserError names a bad path."""
    from PIL import Image

    from evalsuite.files import read_input_bytes
    from evalsuite.images import open_rgb

    if isinstance(ref, Image.Image):
        rgb = ref.convert("RGB")
        return _image_bytes_key(f"{rgb.size}".encode() + rgb.tobytes()), rgb
    path = Path(ref)
    data = read_input_bytes(path, "image")
    return _image_bytes_key(data), open_rgb(data, name=path)


def _pooled(out: Any):
    """transformers 5 returns a ModelOutput from get_*_features; older versions a tensor."""
    return out.pooler_output if hasattr(out, "pooler_output") else out


# ---------------------------------------------------------------- the scorer
class RelevanceScorer:
    """Batched CLIP/SigLIP relevance of (image, text) items, with an image-embedding cache.

    The cache maps an image's content hash (sha256 of the file bytes, or of the pixels for a PIL
    image) to its embedding, so N sentences of one image encode it once, and a renamed copy of a
    file is a hit while an edited file in place is not. `cache_images=False` encodes the image of
    every item anew (what calling CLIP once per (image, sentence) does); it exists for the benchmark
    and for checking that the cache changes no score.
    """

    def __init__(
        self, clip_dir: str | Path, device: str | None = None, batch_size: int = 32,
        cache_images: bool = True, max_cache: int = 100_000, dtype: Any = None,
    ) -> None:
        if batch_size < 1:
            raise UserError(f"batch size must be >= 1, got {batch_size}")
        self.clip_dir = Path(clip_dir)
        self.model, self.tokenizer, self.image_processor, self.family = load_clip(clip_dir, device, dtype)
        self.device = next(self.model.parameters()).device
        self.batch_size = batch_size
        self.cache_images = cache_images
        self.max_cache = max_cache
        self.max_text_length = self._max_text_length()
        self.scale = float(self.model.logit_scale.exp().item())
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.stats = {"image_encodes": 0, "cache_hits": 0, "text_encodes": 0}

    def _max_text_length(self) -> int:
        n_pos = int(self.model.config.text_config.max_position_embeddings)
        tok_max = getattr(self.tokenizer, "model_max_length", None) or n_pos
        return int(min(n_pos, tok_max))

    def describe(self) -> dict:
        """What goes into result configs: which model, which scale, which response score."""
        return {"clip": str(self.clip_dir), "family": self.family, "logit_scale": self.scale,
                "max_text_length": self.max_text_length, "response_score": RESPONSE_SCORE}

    # -- encoders
    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """(n, d) raw text embeddings, truncated to the model's max text length."""
        import torch

        # SigLIP was trained on texts padded to the full length; CLIP pools at EOS and masks pads.
        padding = "max_length" if self.family == "siglip" else True
        names = set(getattr(self.tokenizer, "model_input_names", ["input_ids", "attention_mask"]))
        rows = []
        for i in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(list(texts[i:i + self.batch_size]), padding=padding, truncation=True,
                                 max_length=self.max_text_length, return_tensors="pt")
            enc = {k: v.to(self.device) for k, v in enc.items() if k in names & {"input_ids", "attention_mask"}}
            with torch.inference_mode():
                rows.append(_pooled(self.model.get_text_features(**enc)).float().cpu().numpy())
        self.stats["text_encodes"] += len(texts)
        return np.concatenate(rows) if rows else np.zeros((0, self.model.config.projection_dim), np.float32)

    def encode_images(self, images: Sequence[Any]) -> np.ndarray:
        """(n, d) raw image embeddings of PIL images (no cache)."""
        import torch

        rows = []
        for i in range(0, len(images), self.batch_size):
            px = self.image_processor(images=list(images[i:i + self.batch_size]), return_tensors="pt")
            px = px["pixel_values"].to(self.device, dtype=self.model.dtype)
            with torch.inference_mode():
                rows.append(_pooled(self.model.get_image_features(pixel_values=px)).float().cpu().numpy())
        self.stats["image_encodes"] += len(images)
        return np.concatenate(rows) if rows else np.zeros((0, self.model.config.projection_dim), np.float32)

    def _image_rows(self, refs: Sequence[Any], needed: Sequence[int]) -> np.ndarray:
        """Embeddings of refs[i] for i in `needed`; every ref is read (so a bad path always errors)."""
        decoded: dict[Any, tuple[str, Any]] = {}
        for ref in refs:   # one read + decode per distinct ref in a call
            ident = str(ref) if isinstance(ref, (str, Path)) else id(ref)
            if ident not in decoded:
                decoded[ident] = _load_image(ref)
        loaded = [decoded[str(r) if isinstance(r, (str, Path)) else id(r)] for r in refs]
        if not self.cache_images:
            return self.encode_images([loaded[i][1] for i in needed])
        embs: dict[str, np.ndarray] = {}   # this call's embeddings, safe from eviction below
        missing: dict[str, Any] = {}
        for i in needed:
            key, img = loaded[i]
            if key in embs or key in missing:
                continue
            if key in self._cache:
                self.stats["cache_hits"] += 1
                self._cache.move_to_end(key)
                embs[key] = self._cache[key]
            else:
                missing[key] = img
        for key, emb in zip(missing, self.encode_images(list(missing.values()))):
            embs[key] = self._cache[key] = emb
        while len(self._cache) > self.max_cache:
            self._cache.popitem(last=False)
        return np.stack([embs[loaded[i][0]] for i in needed]) if needed else np.zeros((0, 1))

    # -- scores
    def score_texts(self, items: Sequence[tuple[Any, str]]) -> tuple[np.ndarray, np.ndarray]:
        """(R, cosine) arrays for (image, text) items; empty text gives R = 0.0 and cosine NaN."""
        scores = np.zeros(len(items))
        cos = np.full(len(items), np.nan)
        needed = [i for i, (_, text) in enumerate(items) if text.strip()]
        img = self._image_rows([ref for ref, _ in items], needed)
        if needed:
            c = cosines(img, self.encode_texts([items[i][1] for i in needed]))
            cos[needed] = c
            scores[needed] = relevance_from_cosine(c, self.scale)
        return scores, cos

    def score_responses(self, items: Sequence[tuple[Any, str]], chunk: int = 256,
                        progress: bool = False) -> list[ResponseScore]:
        """Per-sentence and whole-response scores of (image, response) items, `chunk` items at a time.

        The whole text is the split sentences re-joined with spaces, so a response is empty for both
        scores or for neither (list markers and contentless pieces are dropped from both).
        """
        from evalsuite.progress import progress_bar

        out: list[ResponseScore] = []
        for start in progress_bar(range(0, len(items), chunk), disable=not progress, desc="relevance", unit="chunk"):
            part = items[start:start + chunk]
            sentences = [split_sentences(text) for _, text in part]
            flat = [(ref, s) for (ref, _), sents in zip(part, sentences) for s in sents]
            flat += [(ref, " ".join(sents)) for (ref, _), sents in zip(part, sentences)]
            scores, cos = self.score_texts(flat)
            n_sent = sum(len(s) for s in sentences)
            pos = 0
            for j, sents in enumerate(sentences):
                k = n_sent + j
                out.append(ResponseScore(
                    sentences=sents,
                    sentence_scores=[float(x) for x in scores[pos:pos + len(sents)]],
                    sentence_cosines=[float(x) for x in cos[pos:pos + len(sents)]],
                    whole=float(scores[k]),
                    whole_cosine=None if np.isnan(cos[k]) else float(cos[k]),
                ))
                pos += len(sents)
        return out

    def score_response(self, image: Any, response: str) -> ResponseScore:
        return self.score_responses([(image, response)])[0]


# ---------------------------------------------------------------- preference pairs
@dataclass(frozen=True)
class Pair:
    """One preference pair, whatever file format it came from; `image` is relative to an image root."""

    index: int
    image: str
    prompt: str
    chosen: str
    rejected: str
    id: str | None = None


def _last_answer(conv: Any, where: str) -> str:
    if not isinstance(conv, list) or not conv:
        raise UserError(f"{where}: expected a non-empty list of turns")
    answers = [t.get("value") for t in conv if isinstance(t, dict) and t.get("from") in ("gpt", "assistant")]
    if not answers or not isinstance(answers[-1], str):
        raise UserError(f"{where}: no gpt turn with a string 'value'")
    return answers[-1]


def parse_pair(rec: Any, index: int, source: str = "pairs") -> Pair:
    """A LLaVA-style (`conversations`/`rejected_conversations`) or `plain_dpo` record -> Pair."""
    where = f"{source}: record {index}"
    if not isinstance(rec, dict):
        raise UserError(f"{where}: expected an object, got {type(rec).__name__}")
    if "conversations" in rec and "rejected_conversations" in rec:
        human = [t.get("value", "") for t in rec["conversations"] if isinstance(t, dict) and t.get("from") == "human"]
        prompt = human[0] if human else ""
        chosen = _last_answer(rec["conversations"], f"{where}: conversations")
        rejected = _last_answer(rec["rejected_conversations"], f"{where}: rejected_conversations")
    elif "chosen" in rec and "rejected" in rec:
        prompt, chosen, rejected = rec.get("prompt", ""), rec["chosen"], rec["rejected"]
        for name, val in (("chosen", chosen), ("rejected", rejected)):
            if not isinstance(val, str):
                raise UserError(f"{where}: '{name}' must be a string, got {type(val).__name__}")
    else:
        raise UserError(f"{where}: neither conversations/rejected_conversations nor chosen/rejected fields")
    image = rec.get("image")
    if not isinstance(image, str) or not image:
        raise UserError(f"{where}: no 'image' path (relevance needs the image)")
    prompt = prompt.replace("<image>", "").strip() if isinstance(prompt, str) else ""
    rid = rec.get("id")
    return Pair(index=index, image=image, prompt=prompt, chosen=chosen, rejected=rejected,
                id=None if rid is None else str(rid))


def read_pairs(path: str | Path) -> list[Pair]:
    """Pairs of a .json list or a .jsonl file (one record per line)."""
    from evalsuite.files import read_json_records

    path = Path(path)
    records = [r for _, r in read_json_records(path, "pairs", jsonl=path.suffix == ".jsonl")]
    return [parse_pair(rec, i, str(path)) for i, rec in enumerate(records)]


def score_pairs(scorer: RelevanceScorer, pairs: Sequence[Pair], image_root: str | Path,
                progress: bool = False) -> tuple[list[dict], dict]:
    """(per-pair rows, summary) of the chosen and rejected responses of `pairs` (CLI and CSR loop)."""
    from evalsuite.files import safe_join
    from evalsuite.metrics.stats import bootstrap_ci

    paths = [safe_join(image_root, p.image, field=f"record {p.index} image") for p in pairs]
    items = [item for path, p in zip(paths, pairs) for item in ((path, p.chosen), (path, p.rejected))]
    scored = scorer.score_responses(items, progress=progress)
    rows = []
    for p, chosen, rejected in zip(pairs, scored[0::2], scored[1::2]):
        rows.append({"index": p.index, "id": p.id, "image": p.image, "prompt": p.prompt,
                     "chosen_relevance": chosen.score, "rejected_relevance": rejected.score,
                     "gap": chosen.score - rejected.score,
                     "chosen": chosen.to_dict(), "rejected": rejected.to_dict()})
    gaps = np.array([r["gap"] for r in rows])
    lo, hi = bootstrap_ci(gaps, np.mean)
    summary = {
        "n_pairs": len(rows), "response_score": RESPONSE_SCORE, "scorer": scorer.describe(),
        "chosen": describe([r["chosen_relevance"] for r in rows]),
        "rejected": describe([r["rejected_relevance"] for r in rows]),
        "chosen_whole": describe([r["chosen"]["whole"] for r in rows]),
        "rejected_whole": describe([r["rejected"]["whole"] for r in rows]),
        "gap": {"mean": float(gaps.mean()) if len(gaps) else float("nan"), "ci_low": lo, "ci_high": hi,
                "level": 0.95, "n_boot": 1000, "seed": 0},
        "chosen_wins": float(np.mean(gaps > 0)) if len(gaps) else float("nan"),
    }
    return rows, summary
