"""The checkpoints of an ``out_dir``: what is one, find them, quarantine one.

Trainer-neutral: a trainer's ``CheckpointLayout`` (engine/trainers/base.py) says which direct
children of out_dir are checkpoints, which file in one is resumed from, which files a complete one
has and how to check the trainer's own format; this module adds a sha256 manifest, the ``last``
link, quarantine and pruning. It looks only at direct children and never leaves temporaries a
trainer could take for a checkpoint: every temp name runbook makes in an out_dir starts with
``own_tmp_prefix(out_dir)`` = ``tmp-runbook-<token of that out_dir>-`` (temp files end in ``.part``),
so a leftover of ours is told apart from anybody else's ``tmp*`` (partial_saves.py).

Beside it, each a concern of its own: manifest.py (verify without unpickling, seal), suspects.py (a checkpoint
runbook stopped trusting), last_link.py (``out_dir/last``), pruning.py (what to delete, and deleting it).

Pure: ``newest_verified``. Everything else touches files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path


from engine.checkpoints.layout import CheckpointLayout, trainer_writes

MANIFEST_NAME = "runbook-manifest.json"
QUARANTINE_REASON_NAME = "QUARANTINE_REASON.txt"
LAST_LINK_NAME = "last"
OWNER_MARKER_NAME = "runbook-owner.json"   # which run owns this out_dir (engine/checkpoints/out_dir_claim.py)
OWN_TMP_PREFIX = "tmp-runbook-"  # + a token per out_dir: see own_tmp_prefix


def own_tmp_prefix(out_dir: Path) -> str:
    """``tmp-runbook-<token>-``: the token is fixed by out_dir's real path, so a leftover of ours is
    recognised after a watcher restart and another tool's (or another out_dir's) ``tmp-runbook-*`` is not."""
    token = hashlib.sha256(os.path.realpath(out_dir).encode()).hexdigest()[:10]
    return f"{OWN_TMP_PREFIX}{token}-"


def foreign_files(folder: Path, layout: CheckpointLayout) -> list[str]:
    """Names in a checkpoint folder that neither the trainer's save nor runbook writes (sorted)."""
    prefix = own_tmp_prefix(Path(folder).parent)
    return sorted(e.name for e in list_entries(Path(folder))
                  if not ((e.name == MANIFEST_NAME or trainer_writes(layout, e.name)) and e.is_file(follow_symlinks=False))
                  and not e.name.startswith(prefix))


@dataclass(frozen=True)
class Checkpoint:
    path: Path  # the checkpoint's folder, directly in out_dir
    step: int   # optimizer step, from the folder name
    layout: CheckpointLayout = field(compare=False, repr=False)   # the trainer's, which wrote it

    @property
    def resume_file(self) -> Path:
        """The file the trainer resumes from."""
        return self.layout.resume_file(self.path)

    def size_bytes(self) -> int:
        # os.walk does not follow symlinked dirs; lstat counts a link as itself.
        return sum(os.lstat(os.path.join(root, n)).st_size for root, _d, files in os.walk(self.path) for n in files)


@dataclass(frozen=True)
class Verification:
    ok: bool
    reason: str | None  # one line when not ok


def list_entries(path: Path) -> list[os.DirEntry]:
    try:
        return list(os.scandir(path))
    except FileNotFoundError:
        return []


def another_runs_out_dir(folder: Path) -> bool:
    """Does `folder` hold a run's owner marker: another run's out_dir nested in this one's (`out/step-000999`
    as someone's out_dir looks like a corrupt checkpoint)? Never a checkpoint: not verified, moved or deleted."""
    return os.path.lexists(Path(folder) / OWNER_MARKER_NAME)


def other_runs_inside(out_dir: Path) -> list[str]:
    """The direct children of out_dir that are another run's out_dir (sorted names)."""
    return sorted(e.name for e in list_entries(Path(out_dir))
                  if e.is_dir(follow_symlinks=False) and another_runs_out_dir(Path(out_dir) / e.name))


def list_checkpoints(out_dir: Path, layout: CheckpointLayout) -> list[Checkpoint]:
    """Direct children the layout names step checkpoints, oldest first; ``[]`` if out_dir is missing.
    Another run's out_dir is never one, whatever its name."""
    out_dir = Path(out_dir)
    found = [
        Checkpoint(path=out_dir / e.name, step=step, layout=layout)
        for e in list_entries(out_dir)
        if (step := layout.step_of(e.name)) is not None and e.is_dir(follow_symlinks=False)
        and not another_runs_out_dir(out_dir / e.name)
    ]
    return sorted(found, key=lambda c: (c.step, c.path.name))


def newest_verified(checkpoints: list[Checkpoint], verified_steps: set[int]) -> Checkpoint | None:
    """PURE. The highest-step checkpoint whose step is in verified_steps."""
    return max((c for c in checkpoints if c.step in verified_steps), key=lambda c: c.step, default=None)


def quarantine(ckpt: Checkpoint, quarantine_dir: Path, reason: str) -> Path:
    """Move ckpt's folder to ``quarantine_dir/<name>-<UTC timestamp>`` with QUARANTINE_REASON.txt.

    quarantine_dir must lie outside out_dir (ValueError otherwise): a trainer searching out_dir
    recursively (litgpt's ``--resume auto``) would resume from a quarantined folder. Never deletes (across
    filesystems the move is copy, then remove the source). If ``out_dir/last`` pointed here it now
    dangles: the CALLER re-points it, e.g. ``update_last_link(out_dir, newest_verified(...))``.
    """
    out_dir = ckpt.path.parent
    if another_runs_out_dir(ckpt.path):
        raise ValueError(f"refusing to quarantine {ckpt.path}: it is another run's out_dir ({OWNER_MARKER_NAME})")
    if Path(quarantine_dir).resolve().is_relative_to(out_dir.resolve()):
        raise ValueError(f"quarantine_dir {quarantine_dir} is inside out_dir {out_dir}: the trainer could resume from it")
    quarantine_dir = Path(quarantine_dir)
    quarantine_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest, n = quarantine_dir / f"{ckpt.path.name}-{stamp}", 1
    while dest.exists():
        dest, n = quarantine_dir / f"{ckpt.path.name}-{stamp}-{n}", n + 1
    shutil.move(str(ckpt.path), str(dest))  # a plain rename on the same filesystem
    origin = os.path.abspath(ckpt.path)
    (dest / QUARANTINE_REASON_NAME).write_text(
        f"{reason.strip()}\noriginal_path: {origin}\nstep: {ckpt.step}\nquarantined_utc: {stamp}\n")
    return dest


def final_exists(out_dir: Path, layout: CheckpointLayout) -> bool:
    """Has the trainer saved its final checkpoint (the end of a finished run)?"""
    return layout.final_name is not None and layout.resume_file(Path(out_dir) / layout.final_name).is_file()
