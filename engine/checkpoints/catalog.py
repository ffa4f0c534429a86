"""The checkpoint catalog: which checkpoints of out_dir are verified, which are corrupt, where `last`
points, and the one way anything is moved out or deleted (quarantine, rollback, prune).

The watch loop, the actions (through the runtime) and the upkeep jobs all go through it, so the set
of verified steps is never out of step with the folder. Planning stays pure in engine/checkpoints/pruning.py
(plan_prune, newest_verified) and engine/checkpoints/partial_saves.py (plan_cleanup); this class applies it.
"""

from __future__ import annotations

import errno
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol
from pathlib import Path

from engine.checkpoints import store as ckpts
from engine.checkpoints.last_link import last_link_target, update_last_link
from engine.checkpoints.manifest import has_manifest, verify_checkpoint, verify_for_sealing, write_seal
from engine.checkpoints.pruning import apply_prune, plan_prune
from engine.checkpoints.suspects import mark_suspect
from engine.checkpoints import partial_saves
from engine.checkpoints.rollback import RollbackResult, UnreadableWeights
from engine.core.run_folder import RunFolder
from engine.core.journal_writer import JournalWriter
from engine.core.state import CheckpointStatus

if TYPE_CHECKING:
    from engine.checkpoints.layout import CheckpointLayout


class WeightsReader(Protocol):
    """The trainer's adapter (engine/trainers, a floor above), as the catalog uses it."""

    @property
    def layout(self) -> CheckpointLayout: ...
    def find_nonfinite(self, checkpoint: ckpts.Checkpoint, limit: int) -> list[str]: ...


@dataclass
class PruneResult:
    moved: list[str] = field(default_factory=list)       # partial saves moved to quarantine
    removed: list[str] = field(default_factory=list)     # runbook's own temporaries deleted
    deleted: list[str] = field(default_factory=list)     # checkpoint folders deleted
    foreign: list[str] = field(default_factory=list)     # left alone: runbook did not write them
    freed_bytes: int = 0
    kept_steps: list[int] = field(default_factory=list)

    def summary(self) -> str:
        parts = []
        if self.moved:
            parts.append(f"moved {len(self.moved)} partial save(s) to quarantine ({_names(self.moved)})")
        if self.removed:
            parts.append(f"deleted {len(self.removed)} temporary file(s) of runbook's ({_names(self.removed)})")
        parts.append(f"deleted {len(self.deleted)} checkpoint(s){f' ({_names(self.deleted)})' if self.deleted else ''}, "
                     f"freed {self.freed_bytes / 1e6:.1f} MB; kept steps {self.kept_steps}")
        if self.foreign:
            parts.append(self.foreign_warning)
        return "; ".join(parts)

    @property
    def foreign_warning(self) -> str:
        return f"left alone {len(self.foreign)} item(s) that runbook did not write: {_names(self.foreign)}"


class CheckpointCatalog:
    def __init__(self, out_dir: Path, folder: RunFolder, quarantine_dir: Path, adapter: WeightsReader,
                 journal: JournalWriter | None = None, read_only: bool = False):
        self.out_dir = out_dir
        self.folder = folder
        self.quarantine_dir = quarantine_dir
        self.adapter = adapter            # the trainer's: its checkpoint layout and how to read weights
        self.layout = adapter.layout
        self.journal = journal            # None: nothing is journaled (tests, dry-run)
        self.read_only = read_only        # dry-run: verify against manifests, never seal, move or link
        self.verified: set[int] = set()
        self.corrupt: dict[int, str] = {}
        # Verified while the disk had no room for the manifest: step -> the digests of that read, written
        # as its manifest by a later refresh once there is room (no second read of a big checkpoint).
        self.unsealed: dict[int, dict] = {}
        self._last_owed = False           # `last` could not be moved to the newest verified (a full disk)
        self._sizes: dict[Path, int] = {}
        # Told once per name: another run's out_dir inside this one's (never a checkpoint). The watch sets
        # `warn` to its console warning (engine/watch/observation.py); None: journaled only.
        self.warn: Callable[[str], None] | None = None
        self._other_runs_told: set[str] = set()

    # --- what is there ---------------------------------------------------------------------------
    def checkpoints(self) -> list[ckpts.Checkpoint]:
        return ckpts.list_checkpoints(self.out_dir, self.layout)

    def newest_verified(self) -> ckpts.Checkpoint | None:
        return ckpts.newest_verified(self.checkpoints(), self.verified)

    def mark_suspect(self, step: int, reason: str) -> Path | None:
        """Distrust verified checkpoint `step`: its manifest says why (`runbook verify` shows it), and it is moved to
        the quarantine (kept, never deleted), so no resume or `last` chooses it again and the trainer's next save of
        that step writes a fresh folder. None: no verified checkpoint of that step here."""
        ckpt = next((c for c in self.checkpoints() if c.step == step and step in self.verified), None)
        if ckpt is None or self.read_only:
            return None
        mark_suspect(ckpt, reason)
        if self.journal is not None:
            self.journal.append("checkpoint_suspect", step=step, reason=reason)
        return self.quarantine(ckpt, f"suspect: {reason}")

    def final_exists(self) -> bool:
        return ckpts.final_exists(self.out_dir, self.layout)

    def status(self) -> CheckpointStatus:
        existing = self.checkpoints()
        newest = ckpts.newest_verified(existing, self.verified)
        return CheckpointStatus(
            count=len(existing), newest_step=existing[-1].step if existing else None,
            newest_verified_step=newest.step if newest else None, last_size_bytes=self._size(newest),
            corrupt_steps=sorted(self.corrupt),
        )

    def _size(self, ckpt: ckpts.Checkpoint | None) -> int:
        if ckpt is None:
            return 0
        if ckpt.path not in self._sizes:
            self._sizes[ckpt.path] = ckpt.size_bytes()
        return self._sizes[ckpt.path]

    # --- verification ----------------------------------------------------------------------------
    def refresh(self, saving_from_step: int | None = None, quarantine_corrupt: bool = False,
                force: bool = False, sealed_only: bool = False) -> list[str]:
        """Seal each checkpoint once its save is over; return the corrupt ones (quarantined if asked).

        saving_from_step: a live trainer may still be writing checkpoints at or after this step.
        sealed_only: only recheck checkpoints already sealed; an unsealed one may be a save under way
        (a watcher re-attaching to a live trainer cannot tell yet) and is left to a later refresh."""
        self._tell_other_runs()
        newly_verified = False
        bad = []
        read: dict[str, list[int]] = {"sealed": [], "rechecked": []}
        started = time.monotonic()
        existing = self.checkpoints()
        # A folder that went away (deleted by hand, moved by another tool) is forgotten: a later save
        # of that step must be read and verified, not passed as verified unread.
        self.forget((self.verified | set(self.corrupt)) - {c.step for c in existing})
        for c in existing:
            if c.step in self.unsealed and not self.read_only:
                self._try_seal(c)
            if c.step in self.verified and not force:
                continue
            if saving_from_step is not None and c.step >= saving_from_step and not force:
                continue
            if sealed_only and not has_manifest(c):
                continue
            if c.step in self.corrupt and not force:
                bad.append(c.path.name)
                continue
            # A sealed checkpoint is checked against its manifest, not re-sealed: rewriting it would
            # cost a write per file and could seal over damage the manifest is there to catch.
            recheck = self.read_only or has_manifest(c)
            if recheck:
                result = verify_checkpoint(c)
            else:
                result, digests = verify_for_sealing(c)
                if result.ok:
                    self.unsealed[c.step] = digests
                    self._try_seal(c)
            read["rechecked" if recheck else "sealed"].append(c.step)
            if result.ok:
                self.verified.add(c.step)
                self.corrupt.pop(c.step, None)
                newly_verified = True
            else:
                self.corrupt[c.step] = result.reason or "failed verification"
                self.verified.discard(c.step)
                bad.append(c.path.name)
        if self.journal is not None and not self.read_only and (read["sealed"] or read["rechecked"]):
            self.journal.append("verified", forced=force, bad=bad, seconds=round(time.monotonic() - started, 3), **read)
        if quarantine_corrupt and not self.read_only:
            for c in self.checkpoints():
                if c.step in self.corrupt:
                    self.quarantine(c, f"failed verification: {self.corrupt[c.step]}")
        if (newly_verified or self._last_owed) and not self.read_only:
            self.relink_last()
        return bad

    def _tell_other_runs(self) -> None:
        for name in sorted(set(ckpts.other_runs_inside(self.out_dir)) - self._other_runs_told):
            self._other_runs_told.add(name)
            text = (f"{self.out_dir / name} is another run's out_dir (it holds {ckpts.OWNER_MARKER_NAME}): "
                    "never taken for a checkpoint, verified, quarantined or pruned; give the runs separate out_dirs")
            if self.journal is not None and not self.read_only:
                self.journal.append("other_run_inside", path=str(self.out_dir / name))
            if self.warn is not None:
                self.warn(text)

    def _try_seal(self, c: ckpts.Checkpoint) -> None:
        """Write the manifest of a checkpoint verified by its content. A full disk (ENOSPC/EDQUOT) has no room
        for it: the checkpoint counts as verified all the same, so a prune may free the older ones and a resume
        starts from it rather than looping on an older one while unsealable saves fill the disk, and the manifest
        is written by a later refresh, once there is room; the watcher lives on."""
        try:
            write_seal(c, self.unsealed[c.step])
        except OSError as error:
            if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            return
        del self.unsealed[c.step]

    def forget(self, steps: set[int]) -> None:
        """Deleted steps: a later save of the same step must be verified anew, not passed unread."""
        self.verified.difference_update(steps)
        for step in steps:
            self.corrupt.pop(step, None)
            self.unsealed.pop(step, None)

    def resume_file_corrupt(self, resume_file: Path) -> tuple[bool, str | None] | None:
        """Verified afresh, whatever was sealed before (a file damaged after its save is caught by its
        manifest): the checkpoint a resume file is, or was copied from (a rescaled copy keeps the step
        in its name; the copy itself is checked for presence only). (True, problem): corrupt; (False,
        None): intact; None: no checkpoint of this out_dir (cannot tell). Read-only: nothing is moved."""
        resume_file = Path(resume_file)
        step = self.layout.step_in_path(str(resume_file))
        ckpt = next((c for c in self.checkpoints() if c.step == step), None) if step is not None else None
        if ckpt is None:
            return None
        result = verify_checkpoint(ckpt)
        if not result.ok:
            return True, f"{ckpt.path.name}: {result.reason}"
        if resume_file.resolve() != ckpt.resume_file.resolve():
            if not resume_file.is_file() or resume_file.stat().st_size == 0:
                return True, f"the resume copy {resume_file} is missing or empty"
        return False, None

    # --- moving out and deleting ---------------------------------------------------------------
    def quarantine(self, ckpt: ckpts.Checkpoint, reason: str) -> Path:
        dest = ckpts.quarantine(ckpt, self.quarantine_dir, reason)
        self.forget({ckpt.step})
        if self.journal is not None:
            self.journal.append("quarantined", step=ckpt.step, to=str(dest), reason=reason)
        self.relink_last()
        return dest

    def relink_last(self) -> None:
        newest = self.newest_verified()
        link = self.out_dir / ckpts.LAST_LINK_NAME
        if newest is not None:
            try:
                update_last_link(self.out_dir, newest)
            except OSError as error:
                if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                # A full disk has no room for the new link: `last` keeps naming an older verified checkpoint
                # (the prune keeps it) until a later refresh, once there is room.
                self._last_owed = True
                return
            self._last_owed = False
        elif link.is_symlink():
            link.unlink()

    def rollback(self, bad_step: int, steps: int, scan_nonfinite: bool, why: str) -> RollbackResult:
        """Quarantine every checkpoint at/after bad_step or within `steps` before it (and, if asked,
        any whose weights hold NaN/Inf); return the steps moved with their reasons and the new resume point.
        One whose weights cannot be read is kept and named: unreadable is no proof of NaN."""
        limit = bad_step - steps
        result = RollbackResult()
        for c in self.checkpoints():
            reason = None
            if c.step >= bad_step or c.step > limit:
                reason = f"saved at step {c.step}, within {steps} steps of or after the first bad step {bad_step}"
            elif scan_nonfinite and self.layout.resume_file(c.path).is_file():
                try:
                    nonfinite = self.adapter.find_nonfinite(c, limit=3)
                except UnreadableWeights as err:
                    result.unreadable[c.step] = str(err)
                    continue
                except Exception as err:  # noqa: BLE001 - any trainer's reader: cannot read, not non-finite
                    result.unreadable[c.step] = f"cannot read its weights ({type(err).__name__}: {str(err)[:160]})"
                    continue
                if nonfinite:
                    reason = f"non-finite weights in {', '.join(nonfinite)}"
            if reason:
                self.quarantine(c, f"{why}: {reason}")
                result.quarantined[c.step] = reason
        for step, unread in result.unreadable.items():
            if self.journal is not None:
                self.journal.append("weights_unscanned", step=step, reason=unread)
        result.target = self.newest_verified()
        return result

    def prune(self, keep_last_k: int, best_step: int | None, remove_partial: bool, trainer_alive: bool) -> PruneResult:
        """The one prune (retention, upkeep, the prune_checkpoints action, a full disk): only what this
        run wrote may go (its trainer's announced saves, runbook's own temporaries); never the newest
        verified checkpoint, the best, or an unverified one (it may be being written)."""
        result = PruneResult()
        announced = partial_saves.read_announced(self.folder.logs, self.out_dir, self.layout)
        cleanup = partial_saves.find_partial_saves(self.out_dir, announced, layout=self.layout)
        result.foreign = list(cleanup.foreign)
        if remove_partial and not trainer_alive:   # a save in progress looks partial
            for name in cleanup.partial:
                path = self.out_dir / name
                result.freed_bytes += _size(path)
                step = self.layout.step_of(name)
                assert step is not None, name   # plan_cleanup lists only step folders as partial saves
                self.quarantine(ckpts.Checkpoint(path, step, self.layout), "partial save")
                result.moved.append(name)
            result.freed_bytes += partial_saves.remove_temps(self.out_dir, cleanup.temps)
            result.removed = list(cleanup.temps)
        existing = self.checkpoints()
        newest = ckpts.newest_verified(existing, self.verified)
        protected = ({newest.step} if newest else set()) | {c.step for c in existing if c.step not in self.verified}
        # What apply_prune refuses to delete (its own checks, read from the disk) is kept, not planned and refused:
        # the newest sealed checkpoint and `last`'s, older than the newest verified one while a full disk has no
        # room for its manifest or for the new link.
        sealed = [c.step for c in existing if has_manifest(c)]
        last = last_link_target(self.out_dir)
        last_folder = last.resolve() if last is not None else None
        protected |= set(sealed[-1:]) | {c.step for c in existing if c.path.resolve() == last_folder}
        owned = partial_saves.owned_checkpoints(self.out_dir, announced, self.layout)
        doomed = plan_prune(owned, keep_last_k, best_step, protected)
        if doomed:
            result.freed_bytes += apply_prune(self.out_dir, doomed, announced, self.layout)
        self.forget({c.step for c in doomed})
        result.deleted = [c.path.name for c in doomed]
        result.kept_steps = [c.step for c in self.checkpoints()]
        return result


def _names(names: list[str], limit: int = 10) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
