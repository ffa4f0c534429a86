"""One watcher per run folder: an flock kept for the watcher's lifetime (released by the kernel on death)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import TYPE_CHECKING

from engine.core.run_folder import RunFolder

if TYPE_CHECKING:
    from typing_extensions import Self


class RunLocked(RuntimeError):
    pass


class Flock:
    """An flock kept on an open fd from acquire() to release(); a context manager. Subclasses set self._fd
    in acquire() once the lock is theirs."""

    _fd: int | None = None

    def acquire(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class RunLock(Flock):
    def __init__(self, run_dir: Path):
        self.path = RunFolder(run_dir).lock
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = holder_text(fd, self.path)
            os.close(fd)
            raise RunLocked(
                f"another runbook watcher ({who}) is supervising {self.path.parent}; "
                "stop it first or use a different run_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd



def pid_running(pid: int) -> bool:
    """Whether a process with this pid exists (it may not be ours; see lock_holders for who holds a lock)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):   # OverflowError: a number too big to be a pid
        return False
    except PermissionError:   # another user's process
        return True
    return True


def lock_holders(fd: int, locks_file: str = "/proc/locks") -> set[int] | None:
    """The pids /proc/locks says hold an flock on ``fd``'s file, or None where that cannot be known."""
    try:
        info = os.fstat(fd)
        key = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
        with open(locks_file, encoding="ascii", errors="replace") as fh:
            lines = fh.read(1 << 20).splitlines()
    except OSError:
        return None
    pids = set()
    for line in lines:
        parts = line.split()
        if "->" in parts:   # a waiter, not a holder
            continue
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == key and parts[4].isdigit():
            pids.add(int(parts[4]))
    return pids


def holder_text(fd: int, path: Path) -> str:
    """Who holds the lock, checked: the pid written in the lock file only when that process is running
    (and /proc/locks, where readable, agrees); else that the written pid is stale, and who really holds it."""
    written = os.pread(fd, 64, 0).decode(errors="replace").strip()
    pid = int(written) if written.isdigit() and len(written) < 10 else None
    holders = lock_holders(fd)
    if pid is not None and pid_running(pid) and (not holders or pid in holders):
        return f"pid {pid}"
    really = f"; /proc/locks says pid {', '.join(map(str, sorted(holders)))} holds it" if holders else ""
    if pid is None:
        return f"pid unknown: {path.name} holds no pid" + really
    return f"{path.name} names pid {pid}, which is stale (not running{' or not the holder' if holders else ''})" + really

