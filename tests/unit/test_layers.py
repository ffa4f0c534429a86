"""The floors point one way, written down as a table, and read from the source with ast (a lazy
import inside a function counts too).

    runbook/  (CLI, presentation)      uses engine/; engine/ never imports runbook/
    engine/watch                        the loop on top
    engine/language                     playbooks: model, clauses, actions, matching, planning
    engine/trainers                     the trainer seam and one room per trainer
    engine/process  engine/cluster  engine/datascan
    engine/checkpoints  engine/observe  engine/records
    engine/expr
    engine/core                         config and settings, YAML, bounded reads, durable writes, run folder
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

# package -> the engine packages it may import (besides itself). Nothing may import upward.
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "expr": {"core"},
    "records": {"core", "expr"},
    "observe": {"core"},
    "checkpoints": {"core"},
    "datascan": {"core"},
    "cluster": {"core"},
    "process": {"core", "records", "observe", "checkpoints"},
    "trainers": {"core", "observe", "checkpoints", "process"},
    "language": {"core", "expr", "records", "observe", "checkpoints", "datascan"},
    "watch": {"core", "expr", "records", "observe", "checkpoints", "datascan", "cluster", "process", "trainers",
              "language"},
}

# Function-local imports of engine modules, each deferring something heavy or optional; the reason is
# the point: a new one must be added here with its own.
DEFERRED_WITH_REASON = {
    "engine/trainers/run_config.py": "litgpt's user-config module, only for run configs that name a litgpt YAML",
}


def imports_of(path: Path, *, skip_type_checking: bool = False) -> list[tuple[str, int, bool]]:
    """(module, line, inside a function) of every import in a file; `from a import b` also yields
    a.b, since b may be a submodule."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[tuple[str, int, bool]] = []

    def visit(node, in_function: bool) -> None:
        if skip_type_checking and isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            return
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno, in_function) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, node.lineno, in_function))
            out.extend((f"{node.module}.{alias.name}", node.lineno, in_function) for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child, in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(tree, False)
    return out


def engine_modules() -> dict[str, Path]:
    mods = {}
    for path in sorted((REPO / "engine").rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ALLOWED) else None


def resolved(name: str, mods: dict[str, Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def edges(*, skip_type_checking: bool = False) -> dict[str, dict[str, tuple[int, bool]]]:
    mods = engine_modules()
    graph: dict[str, dict[str, tuple[int, bool]]] = {}
    for module, path in mods.items():
        graph[module] = {}
        for name, line, lazy in imports_of(path, skip_type_checking=skip_type_checking):
            target = resolved(name, mods) if name.startswith("engine") else None
            if target and target != module and target != "engine":
                graph[module].setdefault(target, (line, lazy))
    return graph


def test_every_engine_module_lives_in_a_package_of_the_table():
    loose = [m for m in engine_modules() if m != "engine" and package_of(m) is None]
    assert not loose, f"modules outside the packages of ALLOWED: {loose}"
    assert {p.name for p in (REPO / "engine").iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(ALLOWED)


def test_packages_import_only_what_the_table_allows():
    upward = sorted(f"{module} (line {line}) imports {target}"
                    for module, targets in edges().items() for target, (line, _) in targets.items()
                    if package_of(target) != package_of(module)
                    and package_of(target) not in ALLOWED[package_of(module)])
    assert not upward, upward


def test_the_table_itself_points_one_way():
    seen: set[str] = set()

    def visit(package: str, path: tuple[str, ...]) -> None:
        assert package not in path, f"circle in ALLOWED: {' -> '.join(path + (package,))}"
        for below in ALLOWED[package]:
            visit(below, path + (package,))
        seen.add(package)

    for package in ALLOWED:
        visit(package, ())


def test_no_import_circles_between_modules():
    """Tarjan over the module graph; imports only for annotations (TYPE_CHECKING) do not run, and the
    clause union's recursion lives there."""
    graph = edges(skip_type_checking=True)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in graph:
        if v not in index:
            strongconnect(v)
    assert not circles, circles


def test_function_local_imports_only_defer_with_a_reason():
    """A lazy import of an engine module is how circles used to hide: allowed only where listed."""
    lazy = sorted({str(path.relative_to(REPO)) for module, path in engine_modules().items()
                   for name, _, inside in imports_of(path, skip_type_checking=True)
                   if inside and name.startswith("engine.")})
    assert set(lazy) <= set(DEFERRED_WITH_REASON), sorted(set(lazy) - set(DEFERRED_WITH_REASON))


def test_nothing_in_engine_imports_runbook():
    upward = {f"{path.relative_to(REPO)} imports {name}"
              for path in sorted((REPO / "engine").rglob("*.py"))
              for name, _, _ in imports_of(path) if name == "runbook" or name.startswith("runbook.")}
    assert not upward, sorted(upward)


def test_the_engine_does_not_depend_on_slack_or_the_cli_libraries():
    outside = {"slack_sdk", "typer", "rich"}
    found = {f"{path.relative_to(REPO)} imports {name}"
             for path in sorted((REPO / "engine").rglob("*.py"))
             for name, _, _ in imports_of(path) if name.split(".")[0] in outside}
    assert not found, sorted(found)


@pytest.mark.parametrize("source, expected", [
    ("def f():\n    from runbook.slack import NullNotifier\n", ("runbook.slack", True)),
    ("from engine.core import config\n", ("engine.core.config", False)),
])
def test_the_check_sees_lazy_and_submodule_imports(tmp_path, source, expected):
    probe = tmp_path / "probe.py"
    probe.write_text(source)
    assert expected in {(name, lazy) for name, _, lazy in imports_of(probe)}
