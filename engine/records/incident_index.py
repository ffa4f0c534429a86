"""The incident records' index: `incidents/index.tsv`, one line appended per record written.

`runbook status` shows the count by outcome and the newest record; at 100,000 records reading and
validating every one took 278 s and 9.3 GB. Each line names a record, its outcome, and the size and
mtime of the file as written, so a reader trusts a line only while the file is still that very write:
a record rewritten after a crash that lost its line, edited by hand, or older than the index (a run
folder from before it) is read in full instead. The record itself stays the truth and is still
written atomically first; the index is a cache of it and may lag, never lie.

Appended, never rewritten: a torn last line (a crash mid-append) is skipped by the reader. The last
line of an id wins (a record is rewritten as its incident goes from open to recovered).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

INDEX_NAME = "index.tsv"


@dataclass(frozen=True)
class Stamp:
    size: int
    mtime_ns: int


def index_line(incident_id: str, outcome: str, stamp: Stamp) -> str:
    """PURE."""
    return f"{incident_id}\t{outcome}\t{stamp.size}\t{stamp.mtime_ns}\n"


def parse_index(text: str) -> dict[str, tuple[str, Stamp]]:
    """PURE. {id: (outcome, stamp)}, the last line of each id winning; malformed lines skipped."""
    found = {}
    for line in text.split("\n"):
        parts = line.split("\t")
        if len(parts) == 4 and parts[0] and parts[1] and parts[2].isdigit() and parts[3].isdigit():
            found[parts[0]] = (parts[1], Stamp(int(parts[2]), int(parts[3])))
    return found


def stamp_of(path: Path) -> Stamp:
    info = os.stat(path)
    return Stamp(info.st_size, info.st_mtime_ns)


def append_line(folder: Path, line: str) -> None:
    """One write in O_APPEND (whole or torn, never interleaved with another line of ours)."""
    fd = os.open(Path(folder) / INDEX_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_index(folder: Path) -> dict[str, tuple[str, Stamp]]:
    try:
        return parse_index((Path(folder) / INDEX_NAME).read_text(encoding="utf-8", errors="replace"))
    except OSError:   # none yet (a run folder from before the index), or unreadable: every record is read
        return {}
