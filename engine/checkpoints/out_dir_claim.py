"""One run per out_dir: an owner marker that names the run, and an flock kept while its watcher lives.

The run folder's lock (engine/core/lock.py) covers run_dir only: two projects (two run_dirs, two configs)
pointing at one out_dir both ran, the second sealed and resumed the first's checkpoint while it trained,
and the first's retention deleted what the second had resumed from. So out_dir carries:

- ``out_dir/runbook-owner.json`` (store.OWNER_MARKER_NAME): the run that owns it, by the random id kept in
  its run folder (RunFolder.run_id; the id, not the path, so the same run mounted at another path is still
  itself). Written once, by the first watcher of the run; never rewritten or removed by another run. A
  watcher of any other run is refused, whether or not the owner is alive: it would seal, resume and prune
  checkpoints that are not its own.
- an flock on the out_dir folder itself, kept for the watcher's lifetime (the kernel drops it on death):
  two watchers starting at once on a fresh out_dir cannot both write a marker, and a refusal can say
  that the owner is live (and its pid).

``owner_problem`` and ``last_in_the_way`` only read (`runbook check`); ``OutDirClaim`` takes the claim (`watch`).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import socket
import time
from pathlib import Path

from engine.checkpoints.last_link import last_in_the_way
from engine.checkpoints.store import OWNER_MARKER_NAME, own_tmp_prefix
from engine.core.bounded_read import read_json_record
from engine.core.durable import atomic_write, atomic_write_text
from engine.core.errors import SourceError
from engine.core.lock import Flock, lock_holders
from engine.core.run_folder import RunFolder

RUN_ID_CHARS = frozenset("0123456789abcdef-run")


class OutDirTaken(RuntimeError):
    """out_dir belongs to another run (live or not), or its marker cannot be read: nothing in it is touched."""


class OutDirBlocked(RuntimeError):
    """Something of someone else's sits where runbook writes in out_dir (a real folder named ``last``)."""


def read_run_id(folder: RunFolder) -> str | None:
    """This run's id, or None before its first watcher made one."""
    try:
        kept = folder.run_id.read_text(encoding="utf-8", errors="replace")[:64].strip()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    return kept if kept.startswith("run-") and set(kept) <= RUN_ID_CHARS else None


def run_id(folder: RunFolder) -> str:
    """This run's id, made on its first watch and read back on every later one."""
    kept = read_run_id(folder)
    if kept is not None:
        return kept
    made = "run-" + secrets.token_hex(8)
    atomic_write_text(folder.run_id, made + "\n")
    return made


def read_owner(out_dir: Path) -> dict | None:
    """The owner marker's record; None where out_dir has none. OutDirTaken where it cannot be read: a
    marker nobody can read proves nothing, so it is neither trusted nor overwritten."""
    path = Path(out_dir) / OWNER_MARKER_NAME
    try:
        record = read_json_record(path, limit=4096)
    except FileNotFoundError:
        return None
    except (SourceError, OSError) as error:
        why = error.messages[0] if isinstance(error, SourceError) else (error.strerror or str(error))
        raise OutDirTaken(f"out_dir {out_dir}: its owner marker {path} cannot be read ({why}); runbook will not "
                          "use an out_dir whose owner it cannot tell. Fix or move that file if this run owns "
                          "the out_dir") from None
    if not isinstance(record, dict) or not isinstance(record.get("run_id"), str):
        raise OutDirTaken(f"out_dir {out_dir}: its owner marker {path} names no run_id; runbook will not use "
                          "an out_dir whose owner it cannot tell. Fix or move that file if this run owns the out_dir")
    return record


def owner_problem(out_dir: Path, folder: RunFolder) -> str | None:
    """Reads only. Why this run must not use out_dir (another run's marker, or a live holder of
    its lock that is not this run's), or None. Takes nothing: `runbook check` calls it beside a live run."""
    try:
        owner = read_owner(out_dir)
    except OutDirTaken as taken:
        return str(taken)
    if owner is not None and owner["run_id"] != read_run_id(folder):
        return taken_sentence(out_dir, owner, live_holders(out_dir))
    return None


def taken_sentence(out_dir: Path, owner: dict, holders: set[int] | None) -> str:
    """PURE. The refusal, naming the owner (its run_dir and config as its marker says) and whether it is live."""
    whose = f"run_dir {str(owner.get('run_dir'))[:500]}, config {str(owner.get('config'))[:500]}"
    live = (f"its watcher is running now (pid {', '.join(map(str, sorted(holders)))})" if holders
            else "no watcher of it is running now")
    return (f"out_dir {out_dir} belongs to another run ({whose}; {out_dir / OWNER_MARKER_NAME}), and {live}: "
            "runbook will not seal, resume from or prune another run's checkpoints. Give this run its own out_dir; "
            "to hand this out_dir over to this run, stop the other run and remove that marker yourself")


def live_holders(out_dir: Path) -> set[int] | None:
    """The pids holding out_dir's flock (/proc/locks), an empty set when none, None where unknown."""
    try:
        fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        return lock_holders(fd)
    finally:
        os.close(fd)


def marker_record(out_dir: Path, folder: RunFolder, config: Path, run: str) -> dict:
    return {"schema": 1, "run_id": run, "run_dir": str(folder.root.resolve()), "config": str(Path(config).resolve()),
            "host": socket.gethostname(), "claimed_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


class OutDirClaim(Flock):
    """Kept for the watcher's lifetime (a context manager on the supervisor's stack)."""

    def __init__(self, out_dir: Path, folder: RunFolder, config: Path):
        self.out_dir, self.folder, self.config = Path(out_dir), folder, Path(config)
        self._fd: int | None = None

    def acquire(self) -> None:
        if blocked := last_in_the_way(self.out_dir):
            raise OutDirBlocked(blocked)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.out_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holders = lock_holders(fd)
            os.close(fd)
            owner = self._owner_or_unknown()
            raise OutDirTaken(taken_sentence(self.out_dir, owner, holders) if owner["run_id"] != read_run_id(self.folder)
                              else f"out_dir {self.out_dir} is claimed by another watcher of this same run (pid "
                                   f"{', '.join(map(str, sorted(holders or ())))}); stop it first") from None
        try:
            self._claim()
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _owner_or_unknown(self) -> dict:
        try:
            return read_owner(self.out_dir) or {"run_id": "", "run_dir": "unknown (no marker yet)", "config": "unknown"}
        except OutDirTaken:
            return {"run_id": "", "run_dir": "unknown (its marker cannot be read)", "config": "unknown"}

    def _claim(self) -> None:
        """Under the flock: this run's out_dir already, or a fresh one (no marker) that becomes this run's."""
        owner = read_owner(self.out_dir)
        mine = run_id(self.folder)
        if owner is None:
            record = json.dumps(marker_record(self.out_dir, self.folder, self.config, mine), indent=1) + "\n"
            # own_tmp_prefix: a watcher killed mid-write leaves a temp the catalog knows as runbook's
            atomic_write(self.out_dir / OWNER_MARKER_NAME, lambda f: f.write(record.encode()),
                         prefix=own_tmp_prefix(self.out_dir))
        elif owner["run_id"] != mine:
            raise OutDirTaken(taken_sentence(self.out_dir, owner, set()))

