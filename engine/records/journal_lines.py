"""One journal line: how it is written (checksummed, self-delimiting) and how it is read back (validated).

A line is a JSON object whose last member is its own checksum:

    {"kind": "launch", "launch": 1, "pid": 4242, "time": 1700000000.5, "crc32": "1c291ca3"}

The CRC32 covers the exact bytes of the line with that last member removed (`{... "time": 1700000000.5}`),
so it checks what was written, not a re-serialisation. A torn, glued or hand-edited line fails the
check (or the JSON parse) and is skipped on its own; the lines after it are still read. Lines written
before checksums existed have no `crc32` member and are accepted when their fields are valid.

Every field the engine reads back is validated here (type, finite, within range), so a bad line is
one warning with a reason, never a traceback somewhere later. Unknown kinds and unknown fields are
kept as they are: newer watchers add them.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from typing import Any, Callable, NoReturn

from engine.core.env_names import env_problem

CRC_KEY = "crc32"
_CRC_TAIL = re.compile(rb', "' + CRC_KEY.encode() + rb'": "([0-9a-f]{8})"\}$')
MAX_INT = 2**53            # larger "counts", steps or indexes are corruption, not data
MAX_PID = 2**22            # Linux pid_max ceiling
MAX_TIME = 2e10            # epoch seconds; year 2603
RUN_PHASES = {"starting", "running", "incident", "recovering", "completed", "escalated", "stopped"}


class BadLine(ValueError):
    """Why one journal line was skipped (one sentence)."""


def encode(entry: dict) -> bytes:
    """The line for ``entry`` (newline included), with its checksum as the last member."""
    if CRC_KEY in entry:
        raise ValueError(f"'{CRC_KEY}' is reserved in journal entries")
    body = json.dumps(finite(entry), sort_keys=True, default=str, allow_nan=False).encode()
    return body[:-1] + f', "{CRC_KEY}": "{zlib.crc32(body):08x}"}}\n'.encode()


def decode(raw: bytes) -> dict:
    """The entry on one line (without its newline); BadLine says why it cannot be trusted."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadLine(f"not UTF-8 (byte {error.start})") from None
    if not text.strip():
        raise BadLine("an empty line")
    tail = _CRC_TAIL.search(raw)
    if tail is not None:
        body = raw[:tail.start()] + b"}"
        if f"{zlib.crc32(body):08x}" != tail.group(1).decode():
            raise BadLine("checksum mismatch (the line was torn or edited)")
    try:
        entry = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as error:
        raise BadLine(f"not JSON ({_clip(str(error))})") from None
    if not isinstance(entry, dict):
        raise BadLine(f"a JSON {type(entry).__name__}, not an object")
    if tail is None and CRC_KEY in entry:
        raise BadLine("checksum member not where the writer puts it (the line was edited)")
    entry.pop(CRC_KEY, None)
    validate(entry)
    return entry


def finite(value: object) -> object:
    """``value`` with NaN/inf floats replaced by None: a journal line is strict JSON (json.org has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def recover_glued(raw: bytes) -> dict | None:
    """A checksummed entry glued after a torn one (written by an old watcher without the fresh-line rule)."""
    start = raw.find(b'{"', 1)
    while start != -1:
        candidate = raw[start:]
        if _CRC_TAIL.search(candidate):
            try:
                return decode(candidate)
            except BadLine:
                pass
        start = raw.find(b'{"', start + 1)
    return None


# --- the fields the engine reads back -------------------------------------------------------------
def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a number JSON allows")


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _is_int(value: object, low: int = 0, high: int = MAX_INT) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def number_within(value: object, low: float, high: float) -> bool:
    """A real number (not bool, not NaN/inf) in [low, high]; a 400-digit int is compared, never converted."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return (isinstance(value, int) or math.isfinite(value)) and low <= value <= high


def _is_time(value: object) -> bool:
    return number_within(value, 0, MAX_TIME)


def _need(entry: dict, key: str, ok: Callable[[Any], bool], what: str, optional: bool = False) -> None:
    if key not in entry or (optional and entry[key] is None):
        if optional:
            return
        raise BadLine(f"{entry.get('kind')} entry without '{key}'")
    if not ok(entry[key]):
        raise BadLine(f"{entry.get('kind')} entry: '{key}' is {_clip(repr(entry[key]), 40)}, not {what}")


def _is_str(value: object) -> bool:
    return isinstance(value, str)


# kind -> [(key, check, what, optional)]: only what rebuild(), status and report read.
_FIELDS: dict[str, list[tuple[str, Callable[[Any], bool], str, bool]]] = {
    "transition": [("to", lambda v: isinstance(v, str) and v in RUN_PHASES, "a run phase", False),
                   ("from", _is_str, "a string", True), ("reason", _is_str, "a string", True)],
    "launch": [("launch", lambda v: _is_int(v, 1), "a launch number", False),
               ("pid", lambda v: _is_int(v, 1, MAX_PID), "a process id", False),
               ("log", _is_str, "a path", False), ("started", _is_time, "a time", True),
               ("resume_from", _is_str, "a path", True)],
    "incident_opened": [("incident", _is_str, "an incident id", False), ("playbook", _is_str, "a playbook name", False),
                        ("decision", _is_str, "a string", True)],
    "action_done": [("index", _is_int, "an action index", False)],
    "incident_closed": [("outcome", _is_str, "a string", True)],
    "launch_ended": [("log", _is_str, "a path", False), ("start_error", _is_str, "a string", True)],
    "trainer_exited": [("exit_code", lambda v: _is_int(v, -255, 1 << 16), "an exit code", True),
                       ("signal", _is_str, "a signal name", True)],
    "env": [("vars", lambda v: isinstance(v, dict) and not any(env_problem(k, x) for k, x in v.items()),
             "a map of environment variables by POSIX rules (names [A-Za-z_][A-Za-z0-9_]*, no NUL in values); "
             "none of it is passed to the trainer. To clear this warning delete that line from the journal "
             "(each line is checked on its own) and set the variables again with a correct set_env", False),
            ("diagnostic", lambda v: isinstance(v, bool), "true or false", True)],
    "env_restored": [("values", lambda v: isinstance(v, dict) and all(
        isinstance(k, str) and not env_problem(k, "") and (x is None or (isinstance(x, str) and not env_problem(k, x)))
        for k, x in v.items()), "a map of environment variables to values or null", False)],
    "env_lifted": [("names", lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v), "a list of names", False)],
}


def validate(entry: dict) -> None:
    if not isinstance(entry.get("kind"), str) or not entry["kind"]:
        raise BadLine("no 'kind' (every entry names its kind)")
    if not _is_time(entry.get("time")):
        raise BadLine(f"{entry['kind']} entry: 'time' is {_clip(repr(entry.get('time')), 40)}, not a time")
    for key, ok, what, optional in _FIELDS.get(entry["kind"], ()):
        _need(entry, key, ok, what, optional)
