"""Training data from local files: `load_examples(cfg)` -> (train, eval | None, info).

Formats (`--dataset_name`, converters in formats.py): vlquery_json (SFT conversations), plain_dpo,
csr_pairs (LLaVA-style conversations / rejected_conversations), vlfeedback_paired and rlhfv (a local
copy of the public dataset: json/jsonl/parquet file or snapshot directory). Image paths are joined
under `--image_root` (default: the data file's directory) and may not escape it.
"""
from __future__ import annotations

import hashlib
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from evalsuite.errors import UserError
from evalsuite.files import safe_join, sha256_file

log = logging.getLogger(__name__)


def read_examples(dataset_name: str, data_path: str | Path, image_root: str | None = None,
                  score_margin: float = -1.0) -> tuple[list[dict], list[Path]]:
    """Convert every record of every file under data_path; image paths resolved but not yet checked."""
    from training.data.formats import CONVERTERS
    from training.data.readers import data_files, read_records

    if dataset_name not in CONVERTERS:
        raise UserError(f"dataset_name: unknown dataset {dataset_name!r} (known: {', '.join(CONVERTERS)})")
    convert = CONVERTERS[dataset_name]
    files = data_files(data_path)
    examples = []
    for path in files:
        root = Path(image_root) if image_root else path.parent
        for i, row in enumerate(read_records(path)):
            where = f"{path}[{i}]"
            for ex in convert(row, where, score_margin=score_margin):
                if ex["image"] is not None and ex["image_bytes"] is None:
                    ex["image"] = str(safe_join(root, ex["image"], field=f"{where} image"))
                ex["source"] = where
                examples.append(ex)
    return examples, files


def drop_missing_images(examples: list[dict], skip: bool, workers: int = 1) -> tuple[list[dict], int]:
    """Error on the first example whose image file is missing, or drop and count them when `skip`."""
    paths = [ex["image"] if ex["image"] and ex["image_bytes"] is None else None for ex in examples]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:  # stat() of many files on slow storage
        present = list(pool.map(lambda p: p is None or os.path.isfile(p), paths))
    kept = [ex for ex, ok in zip(examples, present) if ok]
    missing = len(examples) - len(kept)
    if missing and not skip:
        first = next(ex for ex, ok in zip(examples, present) if not ok)
        raise UserError(f"{first['source']}: image {first['image']!r} not found "
                        f"({missing} missing in all; --skip_missing_images true drops them)")
    if missing:
        log.warning("skipped %d example(s) whose image is missing", missing)
    return kept, missing


def split_train_eval(examples: list[Any], eval_split: float, data_ratio: float, seed: int = 42,
                     eval_in_train: bool = False) -> tuple[list[Any], list[Any]]:
    """VL-RLHF's split (its dpo.py): HF datasets' `train_test_split(test_size=eval_split, seed=42)`, then
    the first int(len(train) * data_ratio) rows of the (shuffled) train split are kept and the rest is
    unused. eval_split 0: no eval rows, the original order. Returns (train, eval).

    eval_in_train (VL-RLHF's SFT, which draws the same split but trains on the whole dataset; the "SFT
    split" row of docs/csr-fidelity.md): every example trains, in its original order, and the eval rows are
    drawn as above (so they are trained on too); data_ratio is not read there (the config refuses or warns
    about one set: training/config_checks.py `unread`).
    A data_ratio that keeps no training example is one error naming it (the only data_ratio check that needs
    the data; its range is the config's)."""
    if eval_split > 0 and len(examples) > 1:
        from datasets import Dataset

        parts = Dataset.from_dict({"i": list(range(len(examples)))}).train_test_split(test_size=eval_split, seed=seed)
        train_idx, eval_idx = parts["train"]["i"], parts["test"]["i"]
    else:
        train_idx, eval_idx = list(range(len(examples))), []
    if eval_in_train:
        train_idx = list(range(len(examples)))
    else:
        kept = train_idx[: int(len(train_idx) * data_ratio)]
        if train_idx and not kept:
            raise UserError(f"data_ratio: {data_ratio} of {len(train_idx)} training examples (after the eval_split "
                            f"of {len(eval_idx)}) keeps none; raise data_ratio to at least {1 / len(train_idx):.3g}")
        train_idx = kept
    return [examples[i] for i in train_idx], [examples[i] for i in eval_idx]


# VL-RLHF draws a 0.5 % eval split (its DPO holds it out of training, its SFT trains on it too: sft_split,
# docs/csr-fidelity.md); CSR's trainer uses every pair
EVAL_SPLIT = {"sft": 0.005, "dpo": 0.005, "csr": 0.0}


def data_hash(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f"{f.name}:{sha256_file(f)}\n".encode())
    return h.hexdigest()


def load_examples(cfg) -> tuple[Any, Any, dict]:
    """cfg (TrainConfig) -> (train Dataset, eval Dataset or None, info with counts and data_hash)."""
    from datasets import Dataset

    examples, files = read_examples(cfg.resolved_dataset, cfg.data_path, cfg.image_root, cfg.score_margin)
    examples, missing = drop_missing_images(examples, cfg.skip_missing_images, cfg.dataset_num_proc)
    if not examples:
        raise UserError(f"data_path: no training examples in {cfg.data_path!r}")
    eval_split = cfg.eval_split if cfg.eval_split is not None else EVAL_SPLIT.get(cfg.method, 0.0)
    eval_in_train = cfg.method == "sft" and cfg.sft_split == "vlrlhf"
    train, held = split_train_eval(examples, eval_split, cfg.data_ratio, eval_in_train=eval_in_train)
    info = {"dataset_name": cfg.resolved_dataset, "examples": len(examples), "train": len(train),
            "eval": len(held), "eval_split": eval_split, "eval_in_train": eval_in_train and bool(held),
            "missing_images": missing, "text_only": sum(ex["image"] is None and ex["image_bytes"] is None
                                                        for ex in examples),
            "data_hash": data_hash(files)}
    log.info("data: %s", info)
    to_ds = lambda rows: Dataset.from_list([{k: v for k, v in r.items() if k != "source"} for r in rows])  # noqa: E731
    return to_ds(train), (to_ds(held) if held else None), info
