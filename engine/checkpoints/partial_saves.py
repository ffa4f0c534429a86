"""What in out_dir this run wrote, and which of it an interrupted save left behind.

out_dir may be shared (``tmpUserNotes.txt``, another tool's ``tmp8f3k2l``, someone else's
``tmp-runbook-*``), so nothing is recognised by a prefix like ``tmp*``. An entry is this run's only if:

- this run's trainer announced it: ``CheckpointLayout.announced_saves`` reads the announcements from
  the trainer's output, ``<run_dir>/logs/trainer-NNN.log[.gz]`` (runbook's own folder, so the log is
  the record). A trainer announces a save before writing its files (engine/trainers/litgpt/layout.py);
- or runbook named it: ``own_tmp_prefix(out_dir)`` + ``last-*`` / ``prune-*`` / ``*.part`` (a watcher
  killed mid-call leaves these), and ``trainer_tmp_dir``: the trainer's TMPDIR (litgpt's save renames a
  temp file from there onto the checkpoint, so it shares out_dir's filesystem). Nothing else
  uses that folder, so all of its contents are the trainer's temporaries;
- or it is the ``last`` symlink.

Everything else is left alone and reported. ``plan_cleanup`` is pure; the rest reads or changes files.
"""

from __future__ import annotations

import gzip
import io
import shutil
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING

from engine.checkpoints import store as ckpts
from engine.checkpoints.layout import trainer_writes

if TYPE_CHECKING:
    from engine.checkpoints.layout import CheckpointLayout


def trainer_tmp_dir(out_dir: Path) -> Path:
    """The trainer's TMPDIR: inside out_dir (same filesystem: Lightning's save is a rename), ours by name."""
    return Path(out_dir) / f"{ckpts.own_tmp_prefix(out_dir)}trainer"


def clear_trainer_tmp(out_dir: Path) -> None:
    """Before a launch: nobody writes there now, so whatever is left is an interrupted save's temp."""
    shutil.rmtree(trainer_tmp_dir(out_dir), ignore_errors=True)


# --- the trainer's announcements -------------------------------------------------------------


BLOCK = 1 << 20          # bytes read at a time
LONGEST_LINE = 1 << 20   # a longer line may be left out: an announcement names one path (a few KiB at most)


def line_blocks(stream: io.BufferedIOBase) -> Iterator[bytes]:
    """The stream's bytes as blocks of whole lines (each ends with a newline, the last one at the end of the
    stream), each at most BLOCK + LONGEST_LINE bytes: an announcement is one line, so the announcements of the blocks are
    those of the whole log. A line that runs past LONGEST_LINE bytes without a newline is left out whole."""
    carry, skipping = b"", False
    while block := stream.read(BLOCK):
        if skipping:                          # the rest of a line too long to keep
            at = block.find(b"\n")
            if at < 0:
                continue
            block, skipping = block[at + 1:], False
        data = carry + block
        cut = data.rfind(b"\n") + 1
        if cut:
            yield data[:cut]
        carry = data[cut:]
        if len(carry) > LONGEST_LINE:
            carry, skipping = b"", True
    if carry:
        yield carry


_cache: dict[tuple, set[str]] = {}  # (path, inode, size, mtime, out_dir, layout) -> names; logs only grow or get gzipped
_cache_lock = threading.Lock()      # upkeep's thread and the watch loop both ask


def read_announced(log_dir: Path, out_dir: Path, layout: CheckpointLayout) -> frozenset[str]:
    """Every save any launch of this run announced, from ``log_dir/trainer-*.log`` and ``.log.gz``, each read
    a block at a time (a trainer log may be hundreds of MB; the watcher's memory must not grow with it)."""
    found: set[str] = set()
    for path in sorted(Path(log_dir).glob("trainer-*.log*")):
        if not (path.name.endswith(".log") or path.name.endswith(".log.gz")):
            continue
        try:
            st = path.stat()
            key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, str(out_dir), type(layout).__name__)
            with _cache_lock:
                names = _cache.get(key)
            if names is None:
                names = set()
                with (gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")) as stream:
                    for block in line_blocks(stream):   # a block at a time: memory stays flat, whatever the log's size
                        names |= layout.announced_saves(block, out_dir)
                with _cache_lock:  # one entry per log: the live one changes size every few seconds
                    for old in [k for k in _cache if k[0] == key[0]]:
                        del _cache[old]
                    _cache[key] = names
        except (OSError, EOFError, zlib.error):  # (gzip.BadGzipFile is an OSError)
            continue  # a log gzipped away between glob and read is read under its new name next time
        found |= names
    return frozenset(found)


# --- survey and cleanup ----------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """Facts about one direct child of out_dir (gathered by ``survey``)."""

    name: str
    is_dir: bool
    is_symlink: bool
    children: tuple[str, ...] = ()     # for folders: names inside
    looks_whole: bool = False          # step folders: the resume file looks completely written


@dataclass
class Cleanup:
    partial: list[str] = field(default_factory=list)     # our step folders an interrupted save left: quarantine
    temps: list[str] = field(default_factory=list)       # our temporaries, relative to out_dir: delete
    foreign: list[str] = field(default_factory=list)     # not ours, relative to out_dir: leave alone, report


def plan_cleanup(entries: list[Entry], prefix: str, announced: frozenset[str] | set[str], layout: CheckpointLayout,
                 require_side_files: Collection[str] = ()) -> Cleanup:
    """PURE. Sort out_dir's children into this run's partial saves, its temporaries, and others' files."""
    plan = Cleanup()
    for e in sorted(entries, key=lambda e: e.name):
        if e.name.startswith(prefix):
            plan.temps.append(e.name)           # the trainer TMPDIR, a last-link temp, a prune's trash
        elif ((e.name == ckpts.LAST_LINK_NAME and e.is_symlink) or (e.name == ckpts.OWNER_MARKER_NAME and not e.is_dir)
              or (e.is_dir and e.name in getattr(layout, "trainer_folders", ()))):
            continue                            # ours, never deleted: `last`, the owner marker, the trainer's logger folder
        elif e.is_dir and ckpts.OWNER_MARKER_NAME in e.children:
            plan.foreign.append(e.name)         # another run's out_dir, whatever its name: never a partial save
        elif e.is_dir and not e.is_symlink and e.name in announced:
            plan.temps += [f"{e.name}/{c}" for c in e.children if c.startswith(prefix)]
            plan.foreign += [f"{e.name}/{c}" for c in e.children
                             if c != ckpts.MANIFEST_NAME and not trainer_writes(layout, c) and not c.startswith(prefix)]
            missing = any(n not in e.children for n in require_side_files)
            if layout.step_of(e.name) is not None and (not e.looks_whole or missing):
                plan.partial.append(e.name)
        else:
            plan.foreign.append(e.name)
    return plan


def survey(out_dir: Path, layout: CheckpointLayout) -> list[Entry]:
    """Read out_dir's children (cheap: names, and the layout's quick look at each step folder's resume file)."""
    out_dir = Path(out_dir)
    entries = []
    for d in ckpts.list_entries(out_dir):
        is_dir = d.is_dir(follow_symlinks=False)
        children = tuple(sorted(c.name for c in ckpts.list_entries(out_dir / d.name))) if is_dir else ()
        whole = is_dir and layout.step_of(d.name) is not None and layout.looks_whole(out_dir / d.name)
        entries.append(Entry(d.name, is_dir, d.is_symlink(), children, whole))
    return entries


def find_partial_saves(out_dir: Path, announced: frozenset[str] | set[str], layout: CheckpointLayout,
                       require_side_files: Collection[str] = ()) -> Cleanup:
    """What an interrupted save of this run left in out_dir. Call only while no trainer writes there."""
    return plan_cleanup(survey(out_dir, layout), ckpts.own_tmp_prefix(out_dir), announced, layout, require_side_files)


def remove_temps(out_dir: Path, temps: list[str]) -> int:
    """Delete our temporaries named by plan_cleanup; returns bytes freed. Each must carry our prefix
    and lie directly in out_dir or in one of its folders (ValueError otherwise, nothing deleted)."""
    out_dir = Path(out_dir)
    prefix, root = ckpts.own_tmp_prefix(out_dir), out_dir.resolve()
    paths = [out_dir / t for t in temps]
    for p in paths:
        parent = p.parent.resolve() if p.parent != out_dir else root
        if not p.name.startswith(prefix) or not (parent == root or parent.parent == root):
            raise ValueError(f"refusing to delete {p}: not a temporary runbook made in {out_dir}")
    freed = 0
    for p in paths:
        if p.is_dir() and not p.is_symlink():
            freed += sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            freed += p.lstat().st_size if not p.is_symlink() else 0
            p.unlink()
    return freed


def owned_checkpoints(out_dir: Path, announced: frozenset[str] | set[str], layout: CheckpointLayout) -> list[ckpts.Checkpoint]:
    """The checkpoints this run's trainer announced and nobody else added files to: the only ones pruning may delete."""
    return [c for c in ckpts.list_checkpoints(out_dir, layout)
            if c.path.name in announced and not ckpts.foreign_files(c.path, layout)]
