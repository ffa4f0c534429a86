"""Pruning: what to delete (PURE `plan_prune`), and deleting it only where every check says it is this run's
own checkpoint that nothing still needs (`apply_prune`).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from engine.checkpoints.last_link import last_link_target
from engine.checkpoints.layout import CheckpointLayout
from engine.checkpoints.manifest import has_manifest
from engine.checkpoints.store import (LAST_LINK_NAME, OWNER_MARKER_NAME, Checkpoint, another_runs_out_dir,
                                      foreign_files, list_checkpoints, own_tmp_prefix)


def plan_prune(
    checkpoints: list[Checkpoint], keep_last_k: int, best_step: int | None, protected_steps: set[int]
) -> list[Checkpoint]:
    """PURE. What to delete so only best + newest keep_last_k + protected remain, oldest first."""
    if keep_last_k < 0:
        raise ValueError("keep_last_k must be >= 0")
    by_step = sorted(checkpoints, key=lambda c: c.step)
    keep = {c.step for c in by_step[max(0, len(by_step) - keep_last_k) :]} | set(protected_steps)
    if best_step is not None:
        keep.add(best_step)
    return [c for c in by_step if c.step not in keep]


def apply_prune(out_dir: Path, doomed: list[Checkpoint], announced: frozenset[str] | set[str],
                layout: CheckpointLayout) -> int:
    """Delete the doomed folders; return bytes freed. Refuses all (ValueError, nothing deleted) if
    any is not a direct step checkpoint child of out_dir, was not announced by this run's trainer
    (see partial_saves.read_announced), holds a file the trainer and runbook do not write, is the
    newest checkpoint with a manifest (the last verified one), or is where ``out_dir/last`` points."""
    out_dir = Path(out_dir)
    root, last = out_dir.resolve(), last_link_target(out_dir)
    sealed = [c for c in list_checkpoints(out_dir, layout) if has_manifest(c)]
    newest_sealed = sealed[-1].path.resolve() if sealed else None
    for c in doomed:
        p = Path(c.path)
        if p.is_symlink() or p.resolve().parent != root or layout.step_of(p.name) is None:
            raise ValueError(f"refusing to delete {p}: not a checkpoint folder directly inside {out_dir}")
        if p.name not in announced:
            raise ValueError(f"refusing to delete {p}: this run's trainer never announced saving it")
        if another_runs_out_dir(p):
            raise ValueError(f"refusing to delete {p}: it is another run's out_dir ({OWNER_MARKER_NAME})")
        if foreign := foreign_files(p, layout):
            raise ValueError(f"refusing to delete {p}: it holds file(s) runbook did not write: {', '.join(foreign)}")
        if p.resolve() == newest_sealed:
            raise ValueError(f"refusing to delete {p}: it is the newest checkpoint with a manifest")
        if last is not None and last.resolve() == p.resolve():
            raise ValueError(f"refusing to delete {p}: {LAST_LINK_NAME} points at it")
    freed = 0
    for c in doomed:
        if c.path.exists():
            freed += c.size_bytes()
            # Rename first so a trainer's search of out_dir never sees a half-deleted folder.
            trash = out_dir / f"{own_tmp_prefix(out_dir)}prune-{c.path.name}-{uuid.uuid4().hex[:8]}"
            os.rename(c.path, trash)
            shutil.rmtree(trash)
    return freed
