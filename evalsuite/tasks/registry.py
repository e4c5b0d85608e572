"""Lazy task registry: name -> "module:Class" for evalsuite's own tasks, and THE table of lmms-eval
tasks evalsuite ships local-data yamls for. Listing tasks never imports torch.

An own task is its file plus its line in `TASKS`. The class's `Options` dataclass is the task's section
of the eval config (`name:` in a preset, `name.key=value` on the command line), its fields' `alias`
metadata its convenience flags and their `help` its `evalsuite run --help` lines
(evalsuite/run_config.py builds all three from here), and `required` metadata (True, or a short hint of what
to pass; else its help says it) marks an option a run cannot do without: `evalsuite tasks` and the README's
task table list them, with --data-root and judge, and `check_required` refuses a run of the task without it,
before anything is planned (evalsuite/run.py `own_tasks_of_run`), so a task's plan() does not check it again;
`requires` says which other tasks' answers (and so sections) it reads. Optional class attributes: `section` (a section shared by several tasks, e.g.
amber_g and amber_d read `amber`), `reads_data_root = False` (a task with its own data options needs no
--data-root), `uses_judge = True` (it reads the `judge:` section; or a function of its options) and `unread(tasks)` (the section's fields that the tasks of this run never read).

Names in neither table are handed to lmms-eval (see `evalsuite.lmms.task`), so `--tasks chair,mme,pope`
mixes both kinds.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, fields

from evalsuite.errors import UserError

# evalsuite's own tasks
TASKS: dict[str, str] = {
    "amber_d": "evalsuite.tasks.amber:AmberDiscriminativeTask",
    "amber_g": "evalsuite.tasks.amber:AmberGenerativeTask",
    "caption": "evalsuite.tasks.caption:CaptionTask",
    "chair": "evalsuite.tasks.chair:ChairTask",
    "hallusion": "evalsuite.tasks.hallusion:HallusionTask",
    "mmhal": "evalsuite.tasks.mmhal:MmhalTask",
    "objhal": "evalsuite.tasks.objhal:ObjhalTask",
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


def task_class(name: str) -> type:
    """The class of evalsuite's own task `name` (its module imported only now)."""
    mod_name, _, obj = TASKS[name].partition(":")
    return getattr(importlib.import_module(mod_name), obj)


def load_task(name: str):
    """Instantiate evalsuite's own task `name`."""
    return task_class(name)()


def section_of(name: str) -> str:
    """The eval config section own task `name` reads: its `section` attribute, else its name."""
    return getattr(task_class(name), "section", name)


def options_classes() -> dict[str, type]:
    """{section: its Options dataclass}, in registry order: the task sections of the eval config."""
    out: dict[str, type] = {}
    for name in TASKS:
        out.setdefault(section_of(name), task_class(name).Options)
    return out


def task_unread(tasks: list[str]) -> list[tuple]:
    """What the own tasks' `unread(tasks)` hooks report for a run of `tasks` (each hook once)."""
    hooks = {getattr(task_class(n), "unread") for n in TASKS if hasattr(task_class(n), "unread")}
    return [u for hook in sorted(hooks, key=lambda h: h.__qualname__) for u in hook(tasks)]


def is_own_task(name: str) -> bool:
    return name in TASKS


def required_options(name: str) -> list:
    """The Options fields own task `name` declares it cannot run without (`required` metadata: True, or a
    short hint of what to pass)."""
    return [f for f in fields(task_class(name).Options) if f.metadata.get("required")]


def _empty(value) -> bool:
    return value is None or (isinstance(value, (str, list, tuple, dict)) and not
                             (value.strip() if isinstance(value, str) else value))


def check_required(name: str, opts, within: str = "") -> None:
    """Refuse, in one line, the first option own task `name` declares `required` that `opts` leaves None or
    empty: `section.key`, what to pass (the field's flag when it has one) and the task that needs it.
    `within`: the config section holding the eval config (the CSR loop's "eval"), which has no flags."""
    key = f"{within}.{section_of(name)}" if within else section_of(name)
    for f in required_options(name):
        if not _empty(getattr(opts, f.name, None)):
            continue
        value = {"file": "FILE", "dir": "DIR"}.get(f.metadata.get("path"), "VALUE")
        alias = None if within else f.metadata.get("alias")
        how = f"--{alias.replace('_', '-')} {value}" if alias else f"{key}.{f.name}={value}"
        hint = f.metadata["required"] if isinstance(f.metadata["required"], str) else f.metadata.get("help", "")
        raise UserError(f"{key}.{f.name}: not given (task {name} needs it); pass {how}"
                        + (f": {' '.join(hint.split())}" if hint else ""))
