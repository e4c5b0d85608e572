"""Lazy task registry: name -> "module:object". Listing tasks never imports torch.

Names that are not evalsuite's own are handed to lmms-eval (see `evalsuite.adapters.lmms_eval`),
so `--tasks chair,mme,pope` mixes both kinds.
"""
from __future__ import annotations

import importlib

# evalsuite's own tasks
TASKS: dict[str, str] = {
    "caption": "evalsuite.tasks.caption:CaptionTask",
    "chair": "evalsuite.tasks.chair:ChairTask",
    "relevance": "evalsuite.tasks.relevance:RelevanceTask",
}

# lmms-eval tasks evalsuite ships local-data yamls for (name -> evalsuite's distinct task name)
LMMS_LOCAL_TASKS: dict[str, str] = {
    "mme": "evalsuite_mme",
    "pope": "evalsuite_pope",
}


def load_task(name: str):
    """Instantiate evalsuite's own task `name` (module imported only now)."""
    mod_name, _, obj = TASKS[name].partition(":")
    return getattr(importlib.import_module(mod_name), obj)()


def is_own_task(name: str) -> bool:
    return name in TASKS
