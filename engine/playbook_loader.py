"""Read playbook YAML files into validated Playbooks, or refuse with file:line reasons."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from engine.playbook import Playbook, build_playbook
from runbook.yaml_source import SourceError, describe_validation_error, load_yaml, plain


def playbook_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        elif path.is_file():
            files.append(path)
        else:
            raise SourceError([f"{path}: no such playbook file or folder"])
    return files


def load_playbook_file(path: Path) -> Playbook:
    tree = load_yaml(path)
    if not isinstance(tree, dict):
        raise SourceError([f"{path}:1:1: a playbook file must hold one mapping (name, description, match, actions)"])
    try:
        return build_playbook(plain(tree), source=path, line=1, text=path.read_text(encoding="utf-8"))
    except ValidationError as err:
        raise SourceError(describe_validation_error(path, tree, err)) from None


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
    if errors:
        raise SourceError(errors)
    return playbooks
