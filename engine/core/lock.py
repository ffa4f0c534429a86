"""One watcher per run folder: an flock held for the watcher's lifetime (released by the kernel on death)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from engine.core.run_folder import RunFolder


class RunLocked(RuntimeError):
    pass


class RunLock:
    def __init__(self, run_dir: Path):
        self.path = RunFolder(run_dir).lock
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunLocked(
                f"another runbook watcher (pid {holder}) is supervising {self.path.parent}; "
                "stop it first or use a different run_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()
