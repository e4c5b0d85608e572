"""No import circle among evalsuite/ and training/ modules, lazy (function-level) imports included:
a circle means two modules each need the other, so neither can be read, tested or changed alone
(the one there was: training/train.py -> csr/loop.py -> demo/__init__.py -> train.py)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("evalsuite", "training")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict) -> str | None:
    """The longest prefix of dotted `name` that is one of our modules."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, up level - 1
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                names = [f"{base}.{a.name}" for a in node.names]  # a submodule, or a name in `base`
            for name in names:
                target = _resolve(name, modules)
                # a module always imports its ancestor packages first (Python's rule), so an edge to
                # one adds no dependency (training/demo/summary.py's CLI reads training.demo's DemoConfig)
                if target is not None and target != mod and not mod.startswith(target + "."):
                    graph[mod].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}   # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_sees_lazy_imports():
    """The graph is built from function-level imports too: train.py dispatches to the CSR loop lazily."""
    graph = import_graph()
    assert "training.csr.loop" in graph["training.train"]
    assert "training.csr.loop" in graph["training.demo"]


def test_find_cycle_names_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle():
    assert find_cycle(import_graph()) is None


def importers_of(top: str, packages: tuple[str, ...] = (*PACKAGES, "bench")) -> dict[str, list[int]]:
    """{file: line numbers} of every import of package `top` (statements at any depth, and
    importlib.import_module("top...") calls) in the .py files under `packages`."""
    found: dict[str, list[int]] = {}
    for pkg in packages:
        for path in sorted((REPO / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    names = [node.module or ""]
                elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
                      == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
                      and isinstance(node.args[0].value, str)):
                    names = [node.args[0].value]
                if any(n == top or n.startswith(top + ".") for n in names):
                    found.setdefault(str(path.relative_to(REPO)), []).append(node.lineno)
    return found


def test_only_evalsuite_lmms_imports_lmms_eval():
    """Every lmms_eval import lives in evalsuite/lmms/ (issue 25): the rest of the code reaches lmms-eval
    through that package, so a change of lmms-eval's API is one package's change."""
    importers = importers_of("lmms_eval")
    assert "evalsuite/lmms/backend.py" in importers  # the scan sees the imports that are there
    outside = {f: lines for f, lines in importers.items() if not f.startswith("evalsuite/lmms/")}
    assert outside == {}, f"lmms_eval imported outside evalsuite/lmms/: {outside}"


def test_importers_of_sees_every_form(tmp_path, monkeypatch):
    """Module-level, function-level, `from` and importlib imports are all found; mentions in strings are not."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(
        "import lmms_eval.tasks\n"
        "def f():\n    from lmms_eval import evaluator\n"
        "def g():\n    import importlib\n    importlib.import_module('lmms_eval.models')\n"
        "X = 'lmms_eval is mentioned here'\nimport lmms_evalx\n")
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    assert importers_of("lmms_eval", ("pkg",)) == {"pkg/a.py": [1, 3, 6]}
