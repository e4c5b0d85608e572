"""Every name lmms-eval's task index could hold, read from its yaml files without importing lmms_eval.

Importing lmms-eval and building its index takes 10-30 s; a misspelled `--tasks` name should be refused
in about a second. lmms-eval's index (`TaskManager._get_task_and_group`) takes its names from the `task`,
`group` and `tag` values of the yaml files under `lmms_eval/tasks/` (and evalsuite's own yamls), merged
with the templates they include. This module collects every value those three keys hold anywhere in
those files, scalars and list items alike: a superset of the index. A name outside it is certainly no
lmms-eval task; a name inside it still goes through lmms-eval's own check.

The set is cached under $XDG_CACHE_HOME/evalsuite/, keyed by the folders' files and modification times.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from pathlib import Path

log = logging.getLogger(__name__)

_KEY = re.compile(r"""^(\s*)(?:-\s+)?(["']?)(task|group|tag)\2\s*:\s*(.*)$""")
_ITEM = re.compile(r"^(\s*)-\s+(.*)$")
SCAN_VERSION = "1"   # part of the cache key: a changed scanner never reads an older scanner's set
_NAME = re.compile(r"^[^\s:#{}\[\],&*!|>'\"%@`]+$")


def lmms_tasks_dir() -> Path | None:
    """lmms_eval/tasks of the installed lmms-eval, located without importing the package."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("lmms_eval")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    tasks = Path(list(spec.submodule_search_locations)[0]) / "tasks"
    return tasks if tasks.is_dir() else None


def _scalar(text: str) -> str | None:
    text = text.split(" #", 1)[0].strip().strip("'\"")
    return text if text and _NAME.match(text) else None


def names_in_yaml(text: str) -> set[str]:
    """The values of every `task:`, `group:` and `tag:` key in one yaml text (scalars, flow and block lists)."""
    found: set[str] = set()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _KEY.match(line)
        if not m:
            continue
        indent, value = len(m.group(1)), m.group(4).split(" #", 1)[0].strip()
        if value.startswith("["):
            found.update(n for n in (_scalar(v) for v in value.strip("[]").split(",")) if n)
        elif value:
            name = _scalar(value)
            if name:
                found.add(name)
        else:  # a block list: the `- item` lines that follow at this indentation or deeper
            for nxt in lines[i + 1:]:
                if not nxt.strip() or nxt.lstrip().startswith("#"):
                    continue
                item = _ITEM.match(nxt)
                if not item or len(item.group(1)) < indent:
                    break
                name = _scalar(item.group(2))
                if name:
                    found.add(name)
    return found


def _yaml_files(folders: list[Path]) -> list[Path]:
    # lmms-eval's templates (`_default_template_yaml`) have no .yaml suffix but hold tags the index reads
    return sorted(p for d in folders for p in d.rglob("*") if "yaml" in p.name.lower() and p.is_file())


def known_names(folders: list[Path] | None = None, cache_dir: Path | None = None) -> set[str]:
    """Every task/group/tag name in the yaml files under `folders` (default: lmms-eval's tasks folder and
    evalsuite's yamls); cached by the files' paths, sizes and modification times."""
    from evalsuite.lmms import YAML_DIR

    if folders is None:
        tasks = lmms_tasks_dir()
        folders = [YAML_DIR] + ([tasks] if tasks else [])
    files = _yaml_files(folders)
    stamp = hashlib.sha256(SCAN_VERSION.encode())
    for p in files:
        st = p.stat()
        stamp.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    if cache_dir is None:
        cache_dir = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "evalsuite"
    cache = cache_dir / f"lmms_task_names-{stamp.hexdigest()[:16]}.json"
    try:
        return set(json.loads(cache.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    names: set[str] = set()
    for p in files:
        try:
            names |= names_in_yaml(p.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    try:
        from evalsuite.files import write_json_atomic

        cache_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(cache, sorted(names), indent=None)
    except OSError as exc:  # a read-only home: scanned again next time
        log.debug("lmms task name cache not written: %s", exc)
    return names


def refuse_unknown(names: list[str], own: list[str]) -> None:
    """UserError for a name that is evalsuite's own in no way and in no lmms-eval yaml: lmms-eval itself
    is not imported. Names that might be lmms-eval's are left to its own index (validate_task_names)."""
    import difflib

    from evalsuite.errors import UserError

    others = [n for n in names if n not in own]
    if not others:
        return
    tasks = lmms_tasks_dir()
    if tasks is None:  # no lmms-eval to read: its own import will say so
        return
    known = known_names()
    unknown = [n for n in others if n not in known]
    if not unknown:
        return
    hints = []
    for n in unknown:
        close = difflib.get_close_matches(n, own, n=1) or difflib.get_close_matches(n, sorted(known), n=1)
        if close:
            hints.append(f"'{close[0]}'" + (f" for {n}" if len(unknown) > 1 else ""))
    hint = f"; did you mean {', '.join(hints)}?" if hints else ""
    raise UserError(f"--tasks {','.join(unknown)}: unknown task (not an evalsuite task ({', '.join(sorted(own))}) "
                    f"nor an lmms-eval task, group or tag{hint})")
