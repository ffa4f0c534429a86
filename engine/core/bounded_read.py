"""Reading a user's file (config, playbook, state snapshot) without hanging or a traceback.

A path named on the command line can be a FIFO (opening it blocks), a device (/dev/zero never
ends), a folder, a symlink loop, unreadable, or not text at all. Each becomes one sentence in a
SourceError; only a regular file is opened, and at most `limit` bytes of it are read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from engine.core.errors import SourceError

MAX_FILE_BYTES = 4 * 1024 * 1024   # a run config or playbook is a few KB; a snapshot or record well under this
MAX_PATH_CHARS = 4096


def shown(path: Path | str) -> str:
    """The path as printable text, whatever bytes it holds (a terminal may not take surrogates)."""
    text = str(path)
    if len(text) > 200:
        text = text[:200] + "..."
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def regular_file(path: Path) -> os.stat_result:
    """The stat of a regular file (following links), or a SourceError that says in one sentence why the
    path is not one: nothing is opened, so a FIFO or a device cannot block or flood the caller."""
    name = shown(path)
    if len(str(path)) > MAX_PATH_CHARS:
        raise SourceError([f"{name}: path longer than {MAX_PATH_CHARS} characters"])
    if "\x00" in str(path):
        raise SourceError([f"{name}: a path cannot contain a NUL byte"])
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise SourceError([f"{name}: file not found"]) from None
    except OSError as err:  # ELOOP, ENAMETOOLONG, EACCES on a parent folder, ...
        raise SourceError([f"{name}: cannot read: {err.strerror or err}"]) from None
    except ValueError as err:  # a path the OS cannot take (surrogates)
        raise SourceError([f"{name}: not a usable path: {err}"]) from None
    if stat.S_ISDIR(info.st_mode):
        raise SourceError([f"{name}: is a folder, not a file"])
    if not stat.S_ISREG(info.st_mode):
        raise SourceError([f"{name}: not a regular file (a pipe, socket or device cannot be read as a file)"])
    return info


def read_text_file(path: Path, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of a regular file, or a SourceError that says in one sentence why not."""

    name = shown(path)
    info = regular_file(path)
    if info.st_size > limit:
        raise SourceError([f"{name}: {info.st_size:,} bytes, more than the {limit:,} a file here may have"])
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as err:
        raise SourceError([f"{name}: cannot read: {err.strerror or err}"]) from None
    if len(data) > limit:
        raise SourceError([f"{name}: more than the {limit:,} bytes a file here may have"])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise SourceError([f"{name}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x})"]) from None
    if "\x00" in text:
        raise SourceError([f"{name}:{text[: text.index(chr(0))].count(chr(10)) + 1}: contains a NUL byte; not a text file"])
    return text


# --- small JSON records in a run folder ----------------------------------------------------------------
MAX_RECORD_BYTES = 1024 * 1024   # a heartbeat, manifest, outbox message or launcher status is a few KB
MAX_JSON_DEPTH = 64              # runbook's own records nest 5 deep at most


def json_depth_over(value: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests lists/objects more than ``limit`` deep (iteratively: no recursion to run out of)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def parse_json_record(text: str | bytes, name: str, max_depth: int = MAX_JSON_DEPTH) -> Any:   # JSON: any shape
    """``text`` as JSON, or a SourceError saying in one sentence why not: not JSON, nested deeper than
    ``max_depth`` (100,000 `[` raise RecursionError inside json; 900 parse, then break whoever walks them)."""
    import json

    try:
        value = json.loads(text)
    except RecursionError:
        raise SourceError([f"{name}: not a usable JSON record: nested too deeply"]) from None
    except (ValueError, TypeError) as err:   # JSONDecodeError, a bad UTF-8 byte in bytes, a 5,000-digit number
        raise SourceError([f"{name}: not a usable JSON record: {str(err)[:200]}"]) from None
    if json_depth_over(value, max_depth):
        raise SourceError([f"{name}: not a usable JSON record: nested more than {max_depth} levels deep"])
    return value


def read_json_record(path: Path, limit: int = MAX_RECORD_BYTES, max_depth: int = MAX_JSON_DEPTH,
                     name: str | None = None) -> Any:
    """A small JSON record of a run folder (a regular file, at most ``limit`` bytes, UTF-8, at most
    ``max_depth`` levels), or a SourceError in one sentence that starts with ``name`` (default: the
    path). FileNotFoundError passes through unchanged so that callers can tell "not written yet" from
    "written wrong"."""
    if not os.path.lexists(path):
        raise FileNotFoundError(path)
    return parse_json_record(read_text_file(path, limit), name or shown(path), max_depth)


def without_name(error: SourceError, name: str) -> str:
    """PURE. The first sentence of ``error`` without its leading ``name: `` (for callers that name the file themselves)."""
    text = error.messages[0] if error.messages else str(error)
    return text[len(name) + 2:] if text.startswith(name + ": ") else text
