"""Read playbook YAML files into validated Playbooks, or refuse with file:line reasons."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from engine.playbook import Playbook, build_playbook
from engine.bounded_read import MAX_PATH_CHARS, read_text_file, shown
from engine.yaml_source import SourceError, describe_validation_error, load_yaml, plain


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


def load_playbook_file(path: Path) -> Playbook:
    tree = load_yaml(path)
    if not isinstance(tree, dict):
        raise SourceError([f"{path}:1:1: a playbook file must hold one mapping (name, description, match, actions)"])
    try:
        return build_playbook(plain(tree), source=path, line=1, text=read_text_file(path))
    except ValidationError as err:
        raise SourceError(describe_validation_error(path, tree, err)) from None


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


def load_playbooks(paths: list[Path]) -> list[Playbook]:
    """Every playbook under `paths`; all problems of all files reported together."""
    errors: list[str] = []
    playbooks: list[Playbook] = []
    seen: dict[str, Playbook] = {}
    try:
        files = playbook_files(paths)
    except SourceError as err:
        raise err
    for path in files:
        try:
            playbook = load_playbook_file(path)
        except SourceError as err:
            errors += err.messages
            continue
        if playbook.name in seen:
            errors.append(f"{path}:1:1: name: duplicate playbook name '{playbook.name}' (also in {seen[playbook.name].source})")
            continue
        seen[playbook.name] = playbook
        playbooks.append(playbook)
    names = set(seen)
    for playbook in playbooks:
        for target in playbook.inhibits:
            if target not in names:
                errors.append(f"{playbook.source}: inhibits: unknown playbook '{target}'")
    errors += [f"{seen[cycle[0]].source}: inhibits: {describe_cycle(cycle)}" for cycle in inhibit_cycles(playbooks)]
    if errors:
        raise SourceError(errors)
    return playbooks
