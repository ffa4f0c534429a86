"""Writes a crash or a full disk cannot leave half done: a temp file beside the target, fsync,
os.replace, fsync of the folder (the rename is only durable once the directory entry is on disk).
Readers see the old file or the new one, never a mix; a failed write leaves no temp file behind.
The file keeps its permissions (a new one gets the usual 0666 & ~umask, not mkstemp's 0600)."""

from __future__ import annotations

import gzip
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

from engine.core.crash_points import crash_point

TMP_PREFIX = ".runbook-tmp-"   # runbook's own name: a watcher SIGKILLed mid-write leaves one, the next removes it
TMP_SUFFIX = ".part"   # no reader's glob (*.json, *.yaml, step-*/*.pth) matches it


def _read_umask() -> int:
    mask = os.umask(0)   # the only portable way to read it; done once, at import, before any thread
    os.umask(mask)
    return mask


_NEW_FILE_MODE = 0o666 & ~_read_umask()


def _mode_for(dst: Path) -> int:
    try:
        return stat.S_IMODE(os.stat(dst).st_mode)
    except FileNotFoundError:
        return _NEW_FILE_MODE


def fsync_dir(path: Path) -> None:
    """fsync a folder (its entries: a rename into it) or a file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    """fsync every file directly in `folder`, then the folder: its contents are on disk before a rename."""
    for path in sorted(Path(folder).iterdir()):
        if path.is_file():
            fsync_dir(path)
    fsync_dir(folder)


def atomic_write(dst: Path, write: Callable[[BinaryIO], object], prefix: str = TMP_PREFIX) -> None:
    """write(file) into a temp file beside dst, then replace dst with it."""
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=prefix, suffix=TMP_SUFFIX)
    try:
        os.fchmod(fd, _mode_for(dst))
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        crash_point(f"before-replace-{dst.name}")   # the crash tests: the temp file written, not yet in place
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(dst.parent)


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def gzip_replace(path: Path) -> int:
    """path -> path.gz (atomically, as above), then remove path; returns the bytes saved. A crash or
    a full disk leaves the file or its .gz, never half of one."""
    target = path.with_name(path.name + ".gz")

    def write(raw: BinaryIO) -> None:
        with open(path, "rb") as src, gzip.GzipFile(filename=path.name, mode="wb", fileobj=raw,
                                                     mtime=int(path.stat().st_mtime)) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)

    atomic_write(target, write)
    saved = path.stat().st_size - target.stat().st_size
    path.unlink()
    return saved


def remove_stale_temps(folder: Path) -> list[str]:
    """Delete the temp files a killed writer left in folder (only runbook's own `.runbook-tmp-*.part`
    names, never anything else); call it only while no other runbook process writes there."""
    removed: list[str] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if name.startswith(TMP_PREFIX) and name.endswith(TMP_SUFFIX):
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink():
                path.unlink(missing_ok=True)
                removed.append(name)
    return removed

