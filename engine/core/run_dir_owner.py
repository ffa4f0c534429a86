"""One project per run folder: run_dir records the config that first watched it, and another project's
config is refused.

A run_dir shared with another project (a symlink into it, the same path written in two configs) let
project Y's watcher adopt X's orphaned trainer, write Y's escalation into X's journal and call X's run
completed with a final/ that was never there. The run lock (engine/core/lock.py) only keeps two live
watchers apart; this record keeps two projects apart, whether or not the other watcher is alive.

`run_dir/owner.json`: {"config", "project", "run_dir", "out_dir"} of the first `runbook watch`, created
atomically (link, never overwritten by a racing second project). A later watch is refused when its config is
not that file, that file still exists, and the recorded run_dir is still this very folder (another project
shares it). Where the recorded config is gone (the project moved to another mount, its run_dir with it) or the
recorded run_dir is another folder (a copy of the project: its own run folder now), the record is rewritten.

`owner_problem` is PURE; `claim_run_dir` reads and writes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from engine.core.bounded_read import read_json_record
from engine.core.durable import atomic_write_text
from engine.core.errors import SourceError

OWNER_NAME = "owner.json"


class RunDirTaken(RuntimeError):
    """run_dir is another project's (its owner.json names another config that still exists)."""


def owner_record(config: Path, run_dir: Path, out_dir: Path) -> dict:
    config = Path(config).resolve()
    return {"schema": 1, "config": str(config), "project": str(config.parent.parent),
            "run_dir": str(Path(run_dir).resolve()), "out_dir": str(Path(out_dir).resolve())}


def same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def owner_problem(run_dir: Path, owner: dict, config: Path, shared: bool) -> str | None:
    """PURE. Why this config must not use run_dir, owned as `owner` says, or None. `shared`: the recorded
    config still exists and the recorded run_dir is this very folder."""
    theirs, mine = str(owner.get("config")), str(Path(config).resolve())
    if theirs == mine or not shared:
        return None
    return (f"run_dir {run_dir} belongs to another project: it was first watched with {theirs[:500]} (out_dir "
            f"{str(owner.get('out_dir'))[:500]}), not with {mine} ({run_dir / OWNER_NAME}). runbook will not adopt "
            "another project's trainer, write into its journal or judge its run. Give this project its own run_dir "
            "(a symlink into another project's is the same folder); if that project is gone for good, remove "
            f"{run_dir / OWNER_NAME}")


def read_owner(run_dir: Path) -> dict | None:
    """The record, or None where there is none (or it is unreadable: then it is written anew)."""
    try:
        record = read_json_record(Path(run_dir) / OWNER_NAME, limit=8192)
    except (FileNotFoundError, SourceError, OSError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("config"), str) else None


def _create(path: Path, text: str) -> bool:
    """Write `text` at `path` only if nothing is there, atomically (a temp linked in). False if taken."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    atomic_write_text(tmp, text)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def claim_run_dir(run_dir: Path, config: Path, out_dir: Path, record: bool = True) -> None:
    """RunDirTaken where run_dir is another project's; else, with `record`, run_dir is this project's from now on."""
    run_dir, path = Path(run_dir), Path(run_dir) / OWNER_NAME
    mine = owner_record(config, run_dir, out_dir)
    text = json.dumps(mine, indent=1) + "\n"
    owner = read_owner(run_dir)
    if owner is None and record:
        run_dir.mkdir(parents=True, exist_ok=True)
        if _create(path, text):
            return
        owner = read_owner(run_dir)   # another project's watcher wrote it first
    if owner is None:
        return
    recorded = owner["config"]
    if os.path.isfile(recorded) and same_file(recorded, mine["config"]):   # the same file by another path (a mount)
        return
    shared = os.path.isfile(recorded) and same_file(str(owner.get("run_dir")), str(run_dir))
    if problem := owner_problem(run_dir, owner, config, shared):
        raise RunDirTaken(problem)
    if record and owner != mine:   # the project moved or was copied: the record follows it
        atomic_write_text(path, text)
