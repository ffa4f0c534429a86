"""Actions get exactly the declared Runtime protocol: every `rt.<member>` an action uses is declared
there, and the engine's runtime implements every declared member (read from the source with ast)."""

from __future__ import annotations

import ast
import inspect

from engine.language.actions import base
from engine.watch.runtime import EngineRuntime
from pathlib import Path


def declared_members() -> set[str]:
    tree = ast.parse(inspect.getsource(base.Runtime))
    cls = tree.body[0]
    names = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    names |= {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}
    return names


def action_sources() -> list:
    """The action modules, found from the package itself so a move cannot leave this test reading nothing."""
    folder = Path(inspect.getfile(base)).parent
    return sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")


def used_by_actions() -> dict[str, set[str]]:
    used: dict[str, set[str]] = {}
    for path in action_sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "rt":
                used.setdefault(node.attr, set()).add(path.name)
    return used


def test_the_scan_reads_every_action_module_and_finds_their_runtime_uses():
    # Guards the test below: it passed vacuously while it globbed a folder the actions had left.
    names = {p.stem for p in action_sources()}
    assert {"resume", "rollback", "notify", "prune_checkpoints", "set_hyperparameters"} <= names, names
    used = used_by_actions()
    assert len(used) >= 5 and any("rollback.py" in files for files in used.values()), used


def test_every_member_an_action_uses_is_declared_in_the_runtime_protocol():
    undeclared = {name: files for name, files in used_by_actions().items() if name not in declared_members()}
    assert not undeclared, undeclared


def test_the_engine_runtime_implements_every_declared_member():
    missing = {name for name in declared_members() if not hasattr(EngineRuntime, name)
               and name not in EngineRuntime.__init__.__code__.co_names}
    assert not missing, missing
    assert "sup" not in EngineRuntime.__init__.__code__.co_names   # no way back to the watcher
