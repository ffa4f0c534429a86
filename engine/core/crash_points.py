"""Named points where a test may kill the watcher, to prove a restart finishes what was under way.

`RUNBOOK_CRASH_AT=<name>` makes the watcher SIGKILL itself the first time it reaches that point
(`<name>#<n>`: the n-th time). Unset, a crash point costs one dictionary look-up. The names are
those passed to crash_point(): the boundaries of an incident's writes (engine/watch/incident_runner.py, and
its run-log entry in engine/records/held_writes.py), of a journal append (engine/records/journal.py) and of
an atomic file write (engine/core/durable.py).
"""

from __future__ import annotations

import os
import signal

_ENV = "RUNBOOK_CRASH_AT"
_seen: dict[str, int] = {}


def crash_point(name: str) -> None:
    wanted = os.environ.get(_ENV)
    if not wanted:
        return
    target, _, nth = wanted.partition("#")
    if name != target:
        return
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
