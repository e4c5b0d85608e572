"""`evalsuite tasks` lists every task with what it needs, derived from the registry (reads_data_root,
uses_judge, Options fields declared `required`), and the declarations are true: a run without a required
field is refused, from the declaration alone, in one line naming it. The README's task table is checked against the same."""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

import pytest

from evalsuite.commands import tasks as tasks_cmd
from evalsuite.config import opt
from evalsuite.errors import UserError
from evalsuite.tasks import registry

README = Path(__file__).resolve().parents[2] / "README.md"


def test_needs_of_the_registered_tasks():
    assert tasks_cmd.needs("mmhal") == ["mmhal.data", "mmhal.image_root", "judge"]
    assert tasks_cmd.needs("chair") == tasks_cmd.needs("caption") == ["--data-root"]
    assert tasks_cmd.needs("relevance") == ["--data-root", "relevance.clip (--clip)"]
    assert tasks_cmd.needs("amber_g") == tasks_cmd.needs("amber_d") == ["amber.data_root", "amber.image_root"]
    assert tasks_cmd.needs("pope_full") == ["--data-root"]


@dataclasses.dataclass
class _FakeOptions:
    data: str | None = opt(None, "its prompts", path="file", required=True)
    images: str | None = opt(None, "its images", path="dir", required=True, alias="fake_images")
    extra: str | None = opt(None, "optional", path="dir")


class _FakeTask:
    name, version, Options, metrics = "fakejudged", "1", _FakeOptions, ()
    uses_judge = True
    reads_data_root = True


def test_a_new_task_is_listed_with_its_needs_without_a_list_kept_by_hand(monkeypatch, capsys):
    """A task added to the registry only (as objhal and hallusion are): listed, with --data-root, its
    required options (not the optional one) and the judge."""
    monkeypatch.setitem(registry.TASKS, "fakejudged", f"{__name__}:_FakeTask")
    assert tasks_cmd.needs("fakejudged") == ["--data-root", "fakejudged.data", "fakejudged.images (--fake-images)",
                                             "judge"]
    assert tasks_cmd.main(argparse.Namespace(format="text")) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("fakejudged "))
    assert "needs: --data-root, fakejudged.data, fakejudged.images (--fake-images), judge" in line
    assert tasks_cmd.main(argparse.Namespace(format="json")) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["fakejudged"]["needs"][-1] == "judge" and rows["mmhal"]["kind"] == "evalsuite"
    assert rows["mme"] == {"name": "mme", "kind": "lmms-eval", "target": "evalsuite_mme",
                           "about": registry.LMMS_LOCAL_TASKS["mme"].about, "needs": ["--data-root"]}


def _required(name: str) -> list[str]:
    cls = registry.task_class(name)
    return [f.name for f in dataclasses.fields(cls.Options) if f.metadata.get("required")]


@pytest.mark.parametrize("name", [n for n in registry.TASKS if _required(n)])
def test_a_declared_required_field_is_refused_when_missing(name, tmp_path):
    """Each required field left out of an `evalsuite run` config, the others given: the run's own tasks are
    refused, before any is planned, in one line naming `section.field`, what to pass and the task: the
    declaration alone refuses (the task's plan() is never asked)."""
    from evalsuite.run import own_tasks_of_run
    from evalsuite.run_config import load_eval_config

    cls, section = registry.task_class(name), registry.section_of(name)
    (tmp_path / "f.json").write_text("[]")
    paths = {f.name: str(tmp_path / "f.json") if f.metadata.get("path") == "file" else str(tmp_path)
             for f in dataclasses.fields(cls.Options)}
    root = ["--data-root", str(tmp_path)] if getattr(cls, "reads_data_root", True) else []
    for missing in _required(name):
        given = [f"{section}.{f}={paths[f]}" for f in _required(name) if f != missing]
        cfg, _ = load_eval_config(["--ckpt", str(tmp_path / "ckpt"), "--tasks", name, *root, *given])
        with pytest.raises(UserError) as e:
            own_tasks_of_run(cfg, [name])
        message = str(e.value)
        assert message.startswith(f"{section}.{missing}: not given (task {name} needs it); pass ") and \
            "\n" not in message, message
        field = next(f for f in dataclasses.fields(cls.Options) if f.name == missing)
        placeholder = {"file": "FILE", "dir": "DIR"}[field.metadata["path"]]
        alias = field.metadata.get("alias")
        assert (f"pass --{alias} {placeholder}: " if alias else f"pass {section}.{missing}={placeholder}: ") in message


def test_a_task_without_the_data_root_declares_where_its_data_come_from():
    for name in registry.TASKS:
        if not getattr(registry.task_class(name), "reads_data_root", True):
            assert _required(name), f"{name}: reads no --data-root and declares no required=True option"


def readme_tasks() -> dict[str, list[str]]:
    """{task name: its needs} from the README's task table (between its marker comments)."""
    text = README.read_text(encoding="utf-8")
    m = re.search(r"<!-- tasks table: checked by tests/unit/test_tasks_listing.py -->\n(.*?)\n<!-- /tasks table -->",
                  text, re.S)
    assert m, "README: the task table's markers are missing"
    out = {}
    for line in m.group(1).splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        needs = [] if cells[-1] == "nothing" else [n.strip() for n in cells[-1].replace("`", "").split(",")]
        for name in re.findall(r"`([^`]+)`", cells[0]):
            out[name] = needs
    return out


def test_readme_task_table_lists_every_task_with_its_needs():
    """Every registered task (own and lmms-eval local) has a row, and its needs column is `needs(name)`:
    a task added to the registry without a README row, or whose needs change, fails here."""
    listed = readme_tasks()
    want = {r["name"]: r["needs"] for r in tasks_cmd.listing()}
    assert sorted(listed) == sorted(want), "README task table: rows differ from the registry"
    for name, needs in want.items():
        assert listed[name] == needs, f"README task table, {name}: needs {listed[name]}, the registry says {needs}"
