"""The built-in demo: a tiny VLM learns the synthetic world, CSR iterations make it hallucinate less.

    python training/train.py                       # = --config configs/demo.yaml
    python training/train.py --config configs/demo_tiny.yaml   # the shortened version the tests run

Stages (each skipped when its output is already on disk, so a rerun resumes):
 1. world    synthetic COCO world (train + >= 500 held-out val images, MME/POPE question sets)
 2. data     SFT records (captions with a controlled hallucination rate + yes/no questions), CSR prompts
 3. judge    a tiny CLIP trained contrastively with hard negatives (the CSR visual reward)
 4. sft      iteration 0: a small LLaVA-architecture model (the SFT trainer); as in LLaVA its vision
             tower starts from a contrastively trained CLIP (the judge's) and stays frozen
 5. csr      T CSR iterations; the base and every iteration evaluated on the held-out split
 6. report   reports/NAME/index.html
"""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from evalsuite.config import opt
from evalsuite.errors import UserError

log = logging.getLogger(__name__)


@dataclass
class DemoConfig:
    """What the demo builds. `sft` / `csr` are passed to the trainer / CSR loop configs unchanged."""

    method: Literal["demo"] = opt("demo", "the built-in demo")
    name: str = opt("demo", "run name (report title)")
    output_dir: str = opt("runs/demo", "where every stage writes (a rerun resumes there)")
    report_dir: str = opt("reports/demo", "where the HTML report goes")
    store: str = opt("runs/demo/results", "results store of the evaluations")
    seed: int = opt(0, "seed of the world, the data, the models and the training")
    world_images: int = opt(2500, "images of the synthetic world")
    val_fraction: float = opt(0.2, "share of the world held out for evaluation")
    hallucination_rate: float = opt(0.3, "share of SFT captions with a hallucinated object")
    hallucination: Literal["partner", "random"] = opt(
        "partner", "the hallucinated object: a co-occurrence partner, or random (training/demo/data.py)")
    qa_per_image: int = opt(2, "yes/no questions per SFT image")
    model_hidden: int = opt(128, "hidden size of the tiny VLM's language model")
    model_layers: int = opt(2, "layers of the tiny VLM's language model")
    csr_prompts: int = opt(256, "CSR prompts (images) per iteration")
    judge_steps: int = opt(600, "training steps of the CLIP judge")
    # the VLM's vision tower is the judge's: 32 px / 16 = 4 image tokens
    judge_patch_size: int = opt(16, "patch size of the CLIP judge (32 px images)")
    vision_from_judge: bool = opt(True, "the VLM's vision tower starts from the judge's (as LLaVA's from CLIP)")
    vision_feature_layer: int = opt(-2, "vision layer whose patch features the VLM reads (LLaVA: penultimate)")
    expected_minutes: float = opt(15.0, "the run time announced at the start (on a 2-core CPU)")
    sft: dict[str, Any] = opt(help="SFT trainer settings (training/config.py TrainConfig fields)", factory=dict)
    csr: dict[str, Any] = opt(help="CSR loop settings (training/csr/config.py CSRConfig fields)", factory=dict)
    # ranges a fresh clone lands in ("base.POPE acc": [lo, hi], "last.CHAIR_i": ...; columns of summary.py),
    # measured over seeds 0-2 x 1-2 threads; checked and printed at the end of the run
    expect: dict[str, list[float]] = opt(help="ranges the summary's numbers must land in (base|last.<column>)",
                                         factory=dict)

    def __post_init__(self) -> None:
        for name, ok, want in (
                ("world_images", self.world_images >= 10, ">= 10"), ("val_fraction", 0 < self.val_fraction < 1, "in (0, 1)"),
                ("hallucination_rate", 0 <= self.hallucination_rate <= 1, "in [0, 1]"),
                ("qa_per_image", self.qa_per_image >= 0, ">= 0"), ("model_hidden", self.model_hidden >= 8, ">= 8"),
                ("model_layers", self.model_layers >= 1, ">= 1"), ("csr_prompts", self.csr_prompts >= 1, ">= 1"),
                ("judge_steps", self.judge_steps >= 1, ">= 1"), ("judge_patch_size", self.judge_patch_size >= 1, ">= 1"),
                ("expected_minutes", self.expected_minutes > 0, "> 0")):
            if not ok:
                raise UserError(f"{name}: must be {want}, got {getattr(self, name)!r}")
        from training.demo.summary import COLUMNS

        columns = {c for c, _, _ in COLUMNS}
        for key, rng in self.expect.items():
            which, _, col = key.partition(".")
            if which not in ("base", "last") or col not in columns or len(rng) != 2 or rng[0] > rng[1]:
                raise UserError(f"expect.{key}: want base|last.<{', '.join(sorted(columns))}>: [low, high]")
        # the sections are checked now (keys, types, values), not when their stage starts minutes later; kept
        # for `unread`
        self._checked = (
            self.sft_config(Path(self.output_dir) / "init", Path(self.output_dir) / "data" / "sft.json",
                            Path(self.output_dir) / "world", Path(self.output_dir) / "iter_0" / "model", portable=True),
            self.csr_config(Path(self.output_dir) / "data" / "prompts.jsonl", Path(self.output_dir) / "iter_0" / "model",
                            Path(self.output_dir) / "judge", Path(self.output_dir) / "world"))

    def unread(self) -> list:
        """The `sft:` and `csr:` sections' fields that their settings never read (evalsuite/config.py report_unread)."""
        from evalsuite.config import unread_fields

        owned = ("sft.method", "sft.dataset_name")  # sft_config sets them
        own = [("hallucination", "hallucination_rate", 0.0, None)] if self.hallucination_rate == 0 else []  # data.py
        return own + [(f, s, now, None if s in owned else need)
                      for f, s, now, need in unread_fields(self._checked[0], "sft.")] \
            + unread_fields(self._checked[1], "csr.")

    def check_ready(self) -> None:
        """The demo builds its own inputs; only the sections' device settings are checked again here."""
        out = Path(self.output_dir)
        self.sft_config(out / "init", out / "data" / "sft.json", out / "world",
                        out / "iter_0" / "model").check_training_arguments("demo.sft")

    def sft_config(self, init: Path, sft_json: Path, world: Path, base: Path, portable: bool = False):
        """Iteration 0's TrainConfig: the `sft:` section + what the demo owns (model, data, output)."""
        from training.config import build_train_config

        args = {"method": "sft", "model_name_or_path": str(init), "dataset_name": "vlquery_json",
                "data_path": str(sft_json), "image_root": str(world),
                "output_dir": str(Path(self.output_dir) / "iter_0" / "sft"), "merged_dir": str(base),
                "iteration": 0, "seed": self.seed, **self.sft}
        return build_train_config(args, "demo.sft", portable=portable, report=False)  # reported by `unread`

    def csr_config(self, prompts: Path, base: Path, judge: Path, world: Path):
        """The CSR loop's config: the `csr:` section + the demo's models, data, store and output."""
        from training.csr.config import CSRConfig

        csr = {"name": self.name, "model": str(base), "prompts": str(prompts), "image_root": str(world),
               "clip": str(judge), "output_dir": self.output_dir, "store": self.store, **self.csr}
        if isinstance(csr.get("eval"), dict):  # evaluated on the demo's own world, relevance judged by its judge
            ev = csr["eval"]
            relevance = ev.get("relevance") if isinstance(ev.get("relevance"), dict) else {}
            csr["eval"] = {"data_root": str(world), **ev, "relevance": {"clip": str(judge), **relevance}}
        return CSRConfig.from_dict(csr, where="demo.csr", report=False)  # reported by `unread`

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list | None = None) -> "DemoConfig":
        """The preset at `path` with `key=value` / `csr.train.learning_rate=...` overrides."""
        from evalsuite.config import load

        return load(cls, path, overrides)


# the one line after a signal's save in the SFT stage (training/signals.py): a rerun of the demo runs this
# stage with no resume_from_checkpoint, into the same output_dir (same configuration, so accepted), i.e.
# from step 0; --resume_from_checkpoint is train.py's SFT/DPO flag, not the demo's
SFT_SIGNAL_HINT = "; rerun the same command: the demo's SFT stage starts again from step 0 (it does not continue this checkpoint)"


@contextmanager
def _stage(name: str):
    """Log one stage's start and wall time (stages whose output exists are skipped by run_demo)."""
    start = time.time()
    log.info("== stage %s", name)
    yield
    log.info("== stage %s done in %.0f s", name, time.time() - start)


def run_demo(cfg: DemoConfig) -> Path:
    from evalsuite.files import write_json_atomic

    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "demo_config.json", asdict(cfg))
    log.info("evalsuite demo: expected run time about %g minutes on a 2-core CPU; outputs in %s",
             cfg.expected_minutes, out)
    world = out / "world"
    if not (world / "world.json").exists():
        from evalsuite.world.build import build_world

        with _stage("world"):
            build_world(world, images=cfg.world_images, seed=cfg.seed, val_fraction=cfg.val_fraction)
    from training.demo.data import write_demo_data

    data = write_demo_data(world, out / "data", cfg.hallucination_rate, cfg.csr_prompts, cfg.seed,
                           cfg.qa_per_image, cfg.hallucination)
    judge = out / "judge"
    if not (judge / "evalsuite.json").exists():
        from evalsuite.kit.tiny import build_tiny_clip
        from training.demo.judge import JudgeConfig, train_judge

        with _stage("judge"):
            init = build_tiny_clip(out / "judge_init", seed=cfg.seed, patch_size=cfg.judge_patch_size)
            train_judge(init, world, judge, JudgeConfig(steps=cfg.judge_steps, seed=cfg.seed))
    base = out / "iter_0" / "model"
    if not (base / "evalsuite.json").exists():
        with _stage("sft"):
            _train_base(cfg, world, data["sft"], out, base, judge if cfg.vision_from_judge else None)
    with _stage("csr"):
        _run_csr(cfg, world, data["prompts"], base, judge, out)
    with _stage("report"):
        report = _report(cfg)
    from training.demo.summary import report as summary

    text, ok = summary(cfg.store, cfg.expect)
    print(text)
    if not ok:
        log.warning("some numbers are outside the ranges the README states (see OUT lines above)")
    print(f"Report: {report}")
    return report


def _train_base(cfg: DemoConfig, world: Path, sft_json: Path, out: Path, base: Path,
                vision_from: Path | None) -> Path:
    """Iteration 0: SFT a tiny LLaVA on the world (the trainers' SFT path); language model and projector
    start from random, the vision tower from `vision_from`'s CLIP when given."""
    from evalsuite.kit.tiny import build_tiny_vlm
    from training.trainers.sft import run_sft

    init = build_tiny_vlm(out / "init", seed=cfg.seed, hidden=cfg.model_hidden, layers=cfg.model_layers,
                          vision_from=vision_from, vision_feature_layer=cfg.vision_feature_layer)
    tcfg = cfg.sft_config(init, sft_json, world, base)
    tcfg.check_paths()
    return run_sft(tcfg, hint=SFT_SIGNAL_HINT)


def _run_csr(cfg: DemoConfig, world: Path, prompts: Path, base: Path, judge: Path, out: Path) -> None:
    from training.csr.loop import run_csr

    run_csr(cfg.csr_config(prompts, base, judge, world))


def _report(cfg: DemoConfig) -> Path:
    from evalsuite.report import build_report
    from evalsuite.store import Store

    return build_report(Store(cfg.store), cfg.report_dir, title=f"evalsuite {cfg.name}: CSR on the synthetic world")

