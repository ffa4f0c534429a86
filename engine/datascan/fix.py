"""Cleaning after a data scan: a complete copy of a data folder without its bad lines.

The user's text is never edited or moved: the cleaned copy is a new sibling folder that appears
under its final name only once complete, and each rewritten file goes through one atomic write.
"""

from __future__ import annotations

import os
import re
import shutil
from itertools import count
from pathlib import Path
from typing import BinaryIO, Iterable

from engine.datascan.files import copy_lines_except, text_files
from engine.datascan.report import ScanReport
from engine.core.durable import atomic_write


def clean_dir_for(folder: Path) -> Path:
    """A fresh sibling folder for the cleaned data: train -> train-clean (-2, -3... if taken)."""
    folder = Path(os.path.abspath(folder))  # not resolve(): stay beside the folder the config names
    base = re.sub(r"-clean(-\d+)?$", "", folder.name)
    for n in count(1):
        candidate = folder.with_name(f"{base}-clean" if n == 1 else f"{base}-clean-{n}")
        if not candidate.exists():
            return candidate
    raise AssertionError("unreachable")


def fix_file(path: Path, report: ScanReport, out_dir: Path | None = None) -> Path:
    """Write `path` minus its bad lines to out_dir/<same name> (default <folder>-clean/). Never overwrites."""
    path = Path(os.path.abspath(path))
    out_dir = Path(out_dir) if out_dir else path.parent.with_name(path.parent.name + "-clean")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / path.name
    if target.exists():
        raise FileExistsError(f"{target} exists; a cleaned copy never replaces a file")
    bad = report.bad_lines_of(path)

    def write_kept_lines(dst: BinaryIO) -> None:
        with open(path, "rb") as src:
            copy_lines_except(src, dst, bad)

    atomic_write(target, write_kept_lines)
    return target


def fix_folder(folder: Path, report: ScanReport, extra_files: Iterable[Path] = ()) -> Path:
    """A complete cleaned copy of a data folder in a new sibling folder; the original is not touched.

    Files with bad lines are rewritten without them; the others are hard-linked (copied across
    filesystems): the trainer only reads them, and a data set may be large. The folder appears
    under its final name only once complete, so a crash never leaves a half-cleaned data folder,
    and a failure (a file gone since the scan, a full disk) leaves no staging folder behind.
    """
    folder = Path(os.path.abspath(folder))
    target = clean_dir_for(folder)
    staging = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    names = {p.name for p in text_files(folder)}
    names |= {Path(p).name for p in extra_files if Path(os.path.abspath(p)).parent == folder}
    try:
        for name in sorted(names):
            if report.bad_lines_of(folder / name):
                fix_file(folder / name, report, staging)
            else:
                try:
                    os.link(folder / name, staging / name)  # follows a symlinked file to its data
                except OSError:
                    shutil.copy2(folder / name, staging / name)
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
