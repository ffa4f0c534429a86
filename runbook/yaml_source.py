"""YAML loading that remembers where each value came from, so errors can say file:line.

ruamel.yaml's round-trip loader keeps line/column for every mapping key and sequence item; pydantic
reports an error location as a tuple of keys. `locate` walks one with the other.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError

from runbook.durable import atomic_write_text


class SourceError(ValueError):
    """A problem in a user's file, already formatted as `file:line:col: message` lines."""

    def __init__(self, messages: list[str]):
        self.messages = messages
        super().__init__("\n".join(messages))


def round_trip_yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    return yaml


def load_yaml(path: Path) -> Any:
    """Parse `path` with positions kept; a syntax error becomes a SourceError with file:line:col."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SourceError([f"{path}: file not found"]) from None
    try:
        return round_trip_yaml().load(text)
    except MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise SourceError([f"{where}: invalid YAML: {err.problem or err.context}"]) from None


def locate(node: Any, loc: tuple) -> tuple[int, int] | None:
    """1-based (line, col) of the deepest part of `loc` found in the ruamel tree."""
    found = None
    for key in loc:
        if isinstance(node, CommentedMap) and key in node:
            line, col = node.lc.key(key)
            found = (line + 1, col + 1)
            node = node[key]
        elif isinstance(node, CommentedSeq) and isinstance(key, int) and 0 <= key < len(node):
            line, col = node.lc.item(key)
            found = (line + 1, col + 1)
            node = node[key]
        elif isinstance(node, (CommentedMap, CommentedSeq)) and found is None and hasattr(node, "lc"):
            found = (node.lc.line + 1, node.lc.col + 1)
    if found is None and hasattr(node, "lc") and getattr(node.lc, "line", None) is not None:
        found = (node.lc.line + 1, node.lc.col + 1)
    return found


def describe_validation_error(path: Path, tree: Any, err: ValidationError, prefix: tuple = ()) -> list[str]:
    """One `file:line:col: key: reason` line per pydantic error."""
    lines = []
    for item in err.errors():
        loc = tuple(part for part in item["loc"] if not (isinstance(part, str) and part.startswith("function-")))
        # pydantic puts the union member / tag name into loc; keep only parts that exist in the file
        where = locate(tree, prefix + loc)
        key = ".".join(str(part) for part in loc) or "(top level)"
        position = f"{path}:{where[0]}:{where[1]}" if where else str(path)
        reason = item["msg"]
        if item["type"] == "extra_forbidden":
            reason = "unknown key"
        lines.append(f"{position}: {key}: {reason}")
    return lines


def plain(node: Any) -> Any:
    """ruamel containers -> plain dicts/lists (pydantic validates these)."""
    if isinstance(node, dict):
        return {str(k): plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v) for v in node]
    return node


def update_yaml_values(path: Path, updates: dict[str, Any]) -> None:
    """Set top-level keys in a YAML file, keeping comments, order and quoting."""
    yaml = round_trip_yaml()
    tree = yaml.load(path.read_text(encoding="utf-8"))
    for key, value in updates.items():
        tree[key] = value
    buffer = io.StringIO()
    yaml.dump(tree, buffer)
    atomic_write_text(path, buffer.getvalue())
