"""Read playbook YAML files into validated Playbooks, or refuse with file:line reasons.

`runbook playbooks lint` reports through the same functions (read_playbook_files, set_problems),
so lint and watch cannot disagree on what a valid set of playbooks is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engine.language.playbook import Playbook, build_playbook
from engine.language.typed_names import playbook_name_problems
from engine.core.bounded_read import MAX_PATH_CHARS, read_text_file, shown
from engine.core.yaml_source import SourceError, describe_validation_error, load_yaml, locate, plain


def playbook_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if "\x00" in str(path) or len(str(path)) > MAX_PATH_CHARS:  # is_dir() would raise or say False
            raise SourceError([f"{shown(path)}: not a usable playbook path (a NUL byte, or too long)"])
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        elif path.is_file():
            files.append(path)
        else:
            raise SourceError([f"{shown(path)}: no such playbook file or folder"])
    return files


# (path, text) -> the playbook it makes. Playbooks are frozen, so one object serves every reader of the
# same file text: a process that loads the same set again (each `runbook watch --dry-run` run in one
# process, replay over many incidents, the field-corpus harness) parses each file once. A changed file
# has another text, hence another key.
_LOADED: dict[tuple[str, str], Playbook] = {}
_LOADED_MAX = 256


def load_playbook_file(path: Path) -> Playbook:
    text = read_text_file(path)
    key = (str(path), text)
    cached = _LOADED.get(key)
    if cached is not None:
        return cached
    tree = load_yaml(path)
    if not isinstance(tree, dict):
        raise SourceError([f"{path}:1:1: a playbook file must hold one mapping (name, description, match, actions)"])
    try:
        line = (locate(tree, ()) or (1, 1))[0]   # where the mapping starts, after any header comments
        playbook = build_playbook(plain(tree), source=path, line=line, text=text)
    except ValidationError as err:
        raise SourceError(describe_validation_error(path, tree, err)) from None
    if unknown := playbook_name_problems(playbook):   # `state.trainer.alvie` could never be true: refused like a bad key
        raise SourceError([f"{where(path, loc, tree)}: {'.'.join(map(str, loc))}: {problem}" for loc, problem in unknown])
    if len(_LOADED) >= _LOADED_MAX:
        _LOADED.clear()
    _LOADED[key] = playbook
    return playbook


def inhibit_cycles(playbooks: list[Playbook]) -> list[list[str]]:
    """Each cycle of `inhibits` once (a -> b -> a): when all match, none of them may fire."""
    graph = {p.name: [t for t in p.inhibits if t != p.name] for p in playbooks}
    cycles, done = [], set()
    for start in sorted(graph):
        path, stack = [], [(start, iter(graph[start]))]
        on_path = {start}
        path.append(start)
        while stack:  # iterative depth-first search; a few hundred playbooks at most
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                on_path.discard(path.pop())
                done.add(node)
            elif child in on_path:
                cycle = path[path.index(child):]
                if min(cycle) == cycle[0] and cycle not in cycles:
                    cycles.append(cycle)
            elif child in graph and child not in done:
                on_path.add(child)
                path.append(child)
                stack.append((child, iter(graph[child])))
    return cycles


def describe_cycle(cycle: list[str]) -> str:
    return "a cycle: " + " -> ".join(cycle + [cycle[0]]) + " (when all of them match, none fires)"


def read_playbook_files(files: list[Path]) -> tuple[list[Playbook], list[str]]:
    """Every file that is a valid playbook on its own, and the file:line reasons of the others."""
    playbooks: list[Playbook] = []
    errors: list[str] = []
    for path in files:
        try:
            playbooks.append(load_playbook_file(path))
        except SourceError as err:
            errors += err.messages
    return playbooks, errors


@dataclass(frozen=True)
class SetProblem:
    """What is wrong with one playbook among the others, and where in its file."""

    playbook: Playbook               # the one whose file holds the problem
    loc: tuple                       # YAML location in that file: ("name",), ("inhibits", 0), ("inhibits",)
    reason: str
    spoils: tuple[Playbook, ...]     # the playbooks it makes unusable

    def message(self, tree: Any = None) -> str:
        return f"{where(self.playbook.source_file, self.loc, tree)}: {'.'.join(map(str, self.loc))}: {self.reason}"


def set_problems(playbooks: list[Playbook]) -> list[SetProblem]:
    """A name used twice (the later file is refused), `inhibits` naming no playbook, `inhibits` cycles."""
    problems: list[SetProblem] = []
    first: dict[str, Playbook] = {}
    for playbook in playbooks:
        if playbook.name in first:
            reason = f"duplicate playbook name '{playbook.name}' (also in {first[playbook.name].source})"
            problems.append(SetProblem(playbook, ("name",), reason, (playbook,)))
        else:
            first[playbook.name] = playbook
    distinct = list(first.values())
    for playbook in distinct:
        for index, target in enumerate(playbook.inhibits):
            if target not in first:
                problems.append(SetProblem(playbook, ("inhibits", index), f"unknown playbook '{target}'", (playbook,)))
    for cycle in inhibit_cycles(distinct):
        problems.append(SetProblem(first[cycle[0]], ("inhibits",), describe_cycle(cycle), tuple(first[n] for n in cycle)))
    return problems


def where(path: Path | None, loc: tuple, tree: Any = None) -> str:
    """`file:line:col` of a YAML location (the file is read again when no tree is given)."""
    if path is None:
        return "<memory>"
    if tree is None:
        try:
            tree = load_yaml(path)
        except SourceError:  # changed or gone since it was loaded: the file alone still helps
            return str(path)
    found = locate(tree, loc)
    return f"{path}:{found[0]}:{found[1]}" if found else str(path)


def load_playbooks(paths: list[Path]) -> list[Playbook]:
    """Every playbook under `paths`; all problems of all files reported together."""
    playbooks, errors = read_playbook_files(playbook_files(paths))
    errors += [problem.message() for problem in set_problems(playbooks)]
    if errors:
        raise SourceError(errors)
    return playbooks
