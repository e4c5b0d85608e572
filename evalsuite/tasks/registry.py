"""Lazy task registry: name -> "module:Class" for evalsuite's own tasks, and THE table of lmms-eval
tasks evalsuite ships local-data yamls for. Listing tasks never imports torch.

Names in neither table are handed to lmms-eval (see `evalsuite.lmms.task`), so `--tasks chair,mme,pope`
mixes both kinds.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

# evalsuite's own tasks
TASKS: dict[str, str] = {
    "caption": "evalsuite.tasks.caption:CaptionTask",
    "chair": "evalsuite.tasks.chair:ChairTask",
    "mmhal": "evalsuite.tasks.mmhal:MmhalTask",
    "relevance": "evalsuite.tasks.relevance:RelevanceTask",
}


@dataclass(frozen=True)
class LocalLmmsTask:
    """An lmms-eval task (or group) scored by lmms-eval's own code on local data.

    `lmms_task` is the task in evalsuite/lmms/yaml/ (a distinct name: lmms-eval's index lets a built-in
    of the same name win, docs/lmms-eval.md); `world_files` are its files under W/questions/ of a
    world written by `evalsuite world build` ({split} filled in), empty for a group of other entries."""

    lmms_task: str
    world_files: tuple[str, ...] = ()
    paired: bool = False        # scored per question pair (MME): a --limit must keep pairs whole
    about: str = ""


_POPE = "pope_{split}_{sampling}.parquet"

LMMS_LOCAL_TASKS: dict[str, LocalLmmsTask] = {
    "mme": LocalLmmsTask("evalsuite_mme", ("mme_{split}.parquet",), paired=True, about="MME (lmms-eval mme)"),
    "pope": LocalLmmsTask("evalsuite_pope", tuple(_POPE.replace("{sampling}", s) for s in
                                                  ("random", "popular", "adversarial")),
                          about="POPE, all three samplings as one task (lmms-eval pope)"),
    "pope_random": LocalLmmsTask("evalsuite_pope_random", (_POPE.replace("{sampling}", "random"),),
                                 about="POPE random sampling (lmms-eval pope_random)"),
    "pope_pop": LocalLmmsTask("evalsuite_pope_popular", (_POPE.replace("{sampling}", "popular"),),
                              about="POPE popular sampling (lmms-eval pope_pop)"),
    "pope_adv": LocalLmmsTask("evalsuite_pope_adversarial", (_POPE.replace("{sampling}", "adversarial"),),
                              about="POPE adversarial sampling (lmms-eval pope_adv)"),
    "pope_full": LocalLmmsTask("evalsuite_pope_full",
                               about="group of pope_adv, pope_pop, pope_random (lmms-eval pope_full)"),
}


def local_name(lmms_task: str) -> str | None:
    """The evalsuite name of one of evalsuite's lmms-eval yaml tasks (evalsuite_pope_popular -> pope_pop)."""
    return next((name for name, t in LMMS_LOCAL_TASKS.items() if t.lmms_task == lmms_task), None)


def load_task(name: str):
    """Instantiate evalsuite's own task `name` (module imported only now)."""
    mod_name, _, obj = TASKS[name].partition(":")
    return getattr(importlib.import_module(mod_name), obj)()


def is_own_task(name: str) -> bool:
    return name in TASKS
