"""The floors point one way: runbook/ (CLI, presentation) uses engine/; engine/ never imports runbook/.

Read from the source with ast, so a lazy import inside a function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_nothing_in_engine_imports_runbook():
    upward = {f"{path.relative_to(REPO)} imports {name}"
              for path in sorted((REPO / "engine").rglob("*.py"))
              for name in imported_modules(path) if name == "runbook" or name.startswith("runbook.")}
    assert not upward, sorted(upward)


def test_the_engine_does_not_depend_on_slack_or_the_cli_libraries():
    outside = {"slack_sdk", "typer", "rich"}
    found = {f"{path.relative_to(REPO)} imports {name}"
             for path in sorted((REPO / "engine").rglob("*.py"))
             for name in imported_modules(path) if name.split(".")[0] in outside}
    assert not found, sorted(found)


def test_the_check_sees_a_lazy_upward_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from runbook.slack import NullNotifier\n")
    assert "runbook.slack" in imported_modules(probe)
