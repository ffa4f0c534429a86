"""Writes under run_dir (and the run log) that a full disk refuses: which errors are "try again later",
how a whole append is written or not at all, and one warning per kind of write while it fails.

A full disk (ENOSPC), a quota (EDQUOT) or an I/O error (EIO) is passing trouble: the watcher keeps what
it could not write in memory and writes it when space returns (engine/records/journal.py, incident_runner.py,
run_log.py). Any other error (a permission, a folder where a file should be) is not, and still raises.
"""

from __future__ import annotations

from engine.core.events import WatchWarning, ignore, Publish
import errno
import os
import threading
from pathlib import Path

PASSING = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


def passing(error: BaseException) -> bool:
    """True for the errors worth keeping the data in memory for and retrying."""
    return isinstance(error, OSError) and error.errno in PASSING


def reason(error: OSError) -> str:
    return error.strerror or str(error)


class PartialAppend(OSError):
    """An append failed after ``written`` bytes and they could not be cut off again (a torn tail is on disk)."""

    def __init__(self, error: OSError, written: int):
        super().__init__(error.errno, error.strerror)
        self.written = written


def append_whole(path: Path, data: bytes, fresh_line: bool = False) -> OSError | None:
    """Append ``data`` in full, fsynced, or leave the file as it was. With ``fresh_line`` a file whose
    last byte is not a newline (a torn line) gets one first, so ``data`` never glues onto it.

    os.write on a full disk can write part of the bytes and fail on the rest: the file is cut back to
    its old size (ftruncate to a smaller size never needs space). Only when that fails too is the
    torn tail left, and PartialAppend says how much of ``data`` is on disk. Returns fsync's error
    when all of ``data`` was written but could not be synced: writing it again would duplicate it."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        lead = b"\n" if fresh_line and size and os.pread(fd, 1, size - 1) != b"\n" else b""
        data, written = lead + data, 0
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError as error:
            if written:
                try:
                    os.ftruncate(fd, size)
                except OSError:
                    raise PartialAppend(error, max(0, written - len(lead))) from None
            raise
        try:
            os.fsync(fd)
        except OSError as error:
            return error
        return None
    finally:
        os.close(fd)


class WriteTrouble:
    """Says once per kind of write that it failed and what was kept, and once that it works again."""

    def __init__(self, events: Publish | None = None):
        self.events = events or ignore
        self.failing: dict[str, str] = {}    # kind -> the first warning's text
        self._lock = threading.Lock()        # upkeep's thread reports too

    def failed(self, kind: str, error: OSError, kept: str) -> None:
        with self._lock:
            if kind in self.failing:
                return
            self.failing[kind] = text = f"could not write {kind} ({reason(error)}); {kept}"
        self.events(WatchWarning(text))

    def worked(self, kind: str, done: str = "") -> None:
        with self._lock:
            if self.failing.pop(kind, None) is None:
                return
        self.events(WatchWarning(f"{kind} written again" + (f": {done}" if done else "")))
