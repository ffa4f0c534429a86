"""YAML loading that remembers where each value came from, so errors can say file:line.

ruamel.yaml's round-trip loader keeps line/column for every mapping key and sequence item; pydantic
reports an error location as a tuple of keys. `locate` walks one with the other.
"""

from __future__ import annotations

import copy
import datetime as dt
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.scalarbool import ScalarBoolean
from ruamel.yaml.error import MarkedYAMLError

from engine.core.bounded_read import read_text_file, shown
from engine.core.errors import SourceError  # noqa: F401 - raised here and importable from here
from engine.core.durable import atomic_write_text

if TYPE_CHECKING:
    from ruamel.yaml.events import Event


def round_trip_yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    return yaml


MAX_DEPTH = 64            # nesting of mappings/sequences in a config or playbook
MAX_VALUES = 100_000      # values after aliases are expanded (a "billion laughs" file has 10^9)


def load_yaml(path: Path) -> Any:
    """Parse `path` with positions kept; a syntax error becomes a SourceError with file:line:col.

    Bounded: the file is read by read_text_file (regular files only, size capped), nesting is
    checked on the parser's events before anything recursive runs, and aliases may not expand the
    document beyond MAX_VALUES values (pydantic and `plain` would walk every copy).
    """
    text = read_text_file(path)
    key = (str(path), text)
    known = _PARSED.get(key)
    if known is not None:   # the same text parsed before (and checked): a new tree, since callers may change theirs
        events, tree = known
        return _compose_and_construct(round_trip_yaml(), events) if events is not None else copy.deepcopy(tree)
    yaml = round_trip_yaml()
    try:
        events = _ruamel_events(_checked_events(yaml, text, path))
        tree = _compose_and_construct(yaml, events) if events is not None else yaml.load(text)
    except MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{shown(path)}:{mark.line + 1}:{mark.column + 1}" if mark else shown(path)
        raise SourceError([f"{where}: invalid YAML: {err.problem or err.context}"]) from None
    except SourceError:
        raise
    except (RecursionError, MemoryError):
        raise SourceError([f"{shown(path)}: YAML too deeply nested or too large"]) from None
    except ValueError as err:  # ruamel's constructors raise plain ValueErrors too (a bad timestamp, ...)
        raise SourceError([f"{shown(path)}: invalid YAML: {err}"]) from None
    _check_expansion(tree, path)
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    _PARSED[key] = (events, None) if events is not None else (None, copy.deepcopy(tree))
    return tree


# (path, text) -> its events (composed again on each use: cheaper than a deep copy of the tree, which a first
# load would pay too), or its tree where ruamel's own parser read it (parsing costs ~50x a deep copy). A
# process reads the same run config several times (load, reload after each write-back, every command of a
# test or harness run in one process); a changed file has another text, hence another key.
_PARSED: dict[tuple[str, str], tuple[list | None, Any]] = {}
_PARSED_MAX = 64


def _structure_events(yaml: YAML, text: str) -> Iterable:
    """The document's parser events. libyaml's C parser (PyYAML's CSafeLoader) gives the same structure
    ~40x faster than ruamel's pure-Python one (22 playbooks: 0.02 s against 1 s, at every watcher start);
    where it is missing, or refuses the text, ruamel's own parser decides, as the load itself will."""
    try:
        import yaml as pyyaml
        if getattr(pyyaml, "__with_libyaml__", False):
            return list(pyyaml.parse(text, Loader=pyyaml.CSafeLoader))
    except Exception:  # noqa: BLE001 - any refusal of the fast parser: the slow one names the error with file:line
        pass
    return yaml.parse(text)   # lazily: a nesting too deep stops it at the limit, not at the end of the text


def _ruamel_events(events: list) -> list | None:
    """libyaml's events (PyYAML's classes) as ruamel's, for ruamel's own composer and round-trip constructor:
    the same tree, with every key's and item's line and column, at a fraction of the cost (parsing is ~85% of
    ruamel's load; every watcher start reads 24 playbooks). Comments are not kept: nothing reads them from
    load_yaml's tree (a write-back reads the file again, write_yaml_places). None where ruamel's own parser
    must decide: events that are ruamel's already (libyaml missing or refusing the text), a %YAML or %TAG
    directive (ruamel reads YAML 1.2 by default, libyaml only knows 1.1's directives), an explicit tag."""
    from ruamel.yaml import events as ruamel_events

    if not events or type(events[0]).__module__ != "yaml.events":
        return None
    out: list = []
    for event in events:
        name = type(event).__name__
        kind = getattr(ruamel_events, name)
        if getattr(event, "tag", None) not in (None, "!") or getattr(event, "version", None) or getattr(event, "tags", None):
            return None
        marks = {"start_mark": event.start_mark, "end_mark": event.end_mark}
        if name == "ScalarEvent":
            out.append(kind(event.anchor, event.tag, event.implicit, event.value, style=event.style, **marks))
        elif name in ("SequenceStartEvent", "MappingStartEvent"):
            out.append(kind(event.anchor, event.tag, event.implicit, flow_style=event.flow_style, **marks))
        elif name == "AliasEvent":
            out.append(kind(event.anchor, **marks))
        elif name in ("DocumentStartEvent", "DocumentEndEvent"):
            out.append(kind(explicit=event.explicit, **marks))
        else:
            out.append(kind(**marks))
    return out


class _ReplayedEvents:
    """ruamel's parser interface over a list of events already parsed."""

    def __init__(self, events: list):
        self._events = events
        self._next = 0

    def check_event(self, *choices: type[Event]) -> bool:
        if self._next >= len(self._events):
            return False
        return not choices or isinstance(self._events[self._next], choices)

    def peek_event(self) -> Event:
        return self._events[self._next]

    def get_event(self) -> Event:
        event = self._events[self._next]
        self._next += 1
        return event

    def dispose(self) -> None:
        self._events = []


def _compose_and_construct(yaml: YAML, events: list) -> Any:
    """What yaml.load(text) returns, from the text's events (ruamel's composer, resolver and constructor)."""
    from ruamel.yaml.main import DocInfo, version

    yaml.doc_infos.append(DocInfo(requested_version=version(yaml.version)))
    yaml.tags = {}
    replay = _ReplayedEvents(events)
    setattr(yaml, "_parser", replay)   # where YAML.parser keeps the parser it made: ours is used instead
    try:
        return yaml.constructor.get_single_data()
    finally:
        replay.dispose()


def _checked_events(yaml: YAML, text: str, path: Path) -> list:
    """The text's events, its nesting checked before anything recursive runs on them."""
    events = []
    depth = 0
    for event in _structure_events(yaml, text):
        events.append(event)
        name = type(event).__name__
        if name in ("MappingStartEvent", "SequenceStartEvent"):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                raise SourceError([f"{shown(path)}:{mark.line + 1}:{mark.column + 1}: nested more than {MAX_DEPTH} levels deep"])
        elif name in ("MappingEndEvent", "SequenceEndEvent"):
            depth -= 1
    return events


def _check_expansion(tree: Any, path: Path) -> None:
    """Count the values of the document as pydantic would see them, each shared node once per use."""
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:  # depth is bounded by _checked_events, so recursion is safe here
        if not isinstance(node, (dict, list)):
            return 1
        known = sizes.get(id(node))
        if known is None:
            children = node.values() if isinstance(node, dict) else node
            known = sizes[id(node)] = 1 + sum(size(child) for child in children)
        return known

    if size(tree) > MAX_VALUES:
        line = 1
        if isinstance(tree, CommentedMap):  # name the first top-level key whose value is too big
            big = next((k for k, v in tree.items() if size(v) > MAX_VALUES // 10), None)
            line = tree.lc.key(big)[0] + 1 if big is not None else 1
        raise SourceError([f"{shown(path)}:{line}:1: aliases expand to more than {MAX_VALUES:,} values; "
                           "write the values out instead"])


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
    """ruamel's tree -> plain Python data: dicts, lists, str, int, float, bool, None (and dates, bytes).

    The round-trip loader hands back its own subclasses (ScalarFloat for `0.1`, HexInt for `0x1F`,
    DoubleQuotedScalarString, ScalarBoolean and ScalarInt behind an anchor, TimeStamp). pydantic keeps
    them as they are in `Any` fields (`trainer.extra`), and a safe YAML or JSON writer refuses them,
    so the whole tree is converted here, once, where a user's file is loaded.
    """
    if isinstance(node, dict):
        return {str(k): plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [plain(v) for v in node]
    if node is None or type(node) in (str, int, float, bool, bytes, dt.date, dt.datetime):
        return node
    if isinstance(node, ScalarBoolean):      # an int subclass: test it before int
        return bool(node)
    if isinstance(node, dt.datetime):        # TimeStamp; before date, its base
        return dt.datetime.combine(node.date(), node.time(), node.tzinfo)
    if isinstance(node, dt.date):
        return dt.date(node.year, node.month, node.day)
    kinds: tuple[type, ...] = (bool, int, float, str, bytes)   # one type each: kind(node) is node's own kind
    for kind in kinds:
        if isinstance(node, kind):
            return kind(node)
    if isinstance(node, TaggedScalar):       # `!custom value`: the value, as written
        return str(node.value)
    return node


def update_yaml_values(path: Path, updates: dict[str, Any]) -> None:
    """Set top-level keys in a YAML file, keeping comments, order and quoting."""
    write_yaml_places(path, {(key,): value for key, value in updates.items()})


def write_yaml_places(path: Path, values: dict[tuple, Any]) -> None:
    """Set the value at each place (a tuple of keys) in the user's YAML file. Where every place already
    holds a one-line scalar, only those scalars' characters change (yaml_scalar_text), so the rest of
    the file, its indentation of lists included, stays byte for byte as the user wrote it; otherwise
    ruamel's round trip writes it (comments and order kept, indentation its own)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    edited = replace_scalars(text, values)
    if edited is None:
        yaml = round_trip_yaml()
        tree = yaml.load(text)
        for keys, value in values.items():
            _set_place(tree, keys, value)
        buffer = io.StringIO()
        yaml.dump(tree, buffer)
        edited = buffer.getvalue()
    atomic_write_text(path, edited)


def replace_scalars(text: str, values: dict[tuple, Any]) -> str | None:
    """PURE. `text` with the scalar at each place replaced by the new value written as YAML, or None when
    a place is missing, not a one-line scalar, or carries an anchor, alias or tag (an in-place edit
    there would change what other keys mean)."""
    from ruamel.yaml.nodes import MappingNode, ScalarNode

    try:
        root = YAML(typ="rt").compose(text)
    except (MarkedYAMLError, ValueError):
        return None
    spans = []
    for keys, value in values.items():
        node = root
        for key in keys:
            if not isinstance(node, MappingNode):
                return None
            node = next((v for k, v in node.value if isinstance(k, ScalarNode) and k.value == key), None)
            if node is None:
                return None
        if not isinstance(node, ScalarNode) or getattr(node, "anchor", None) or node.start_mark.line != node.end_mark.line:
            return None
        start, end = node.start_mark.index, node.end_mark.index
        if start == end or text[start:end][:1] in ("!", "&", "*", "|", ">") or (new := yaml_scalar_text(value)) is None:
            return None
        spans.append((start, end, new))
    for start, end, new in sorted(spans, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def yaml_scalar_text(value: Any) -> str | None:
    """PURE. A number, bool or string as YAML that YAML 1.1 readers (PyYAML, which trainers' jsonargparse
    uses) and 1.2 readers (ruamel) both read back as the same value; None for anything else."""
    import json
    import math

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        text = repr(value)
        mantissa, _, exponent = text.partition("e")
        if "." not in mantissa:
            mantissa += ".0"          # 1.1 needs the dot: `1e-05` is a string there
        if exponent and exponent[0] not in "+-":
            exponent = "+" + exponent  # and a signed exponent
        return mantissa + ("e" + exponent if exponent else "")
    if isinstance(value, (str, Path)):
        return json.dumps(str(value), ensure_ascii=False)   # a JSON string is a YAML double-quoted scalar
    return None


def _set_place(tree: dict, keys: tuple, value: object) -> None:
    *parents, last = keys
    for parent in parents:
        if not isinstance(tree.get(parent), dict):
            tree[parent] = {}
        tree = tree[parent]
    tree[last] = value
