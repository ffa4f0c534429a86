"""The checkpoint catalog of an ``out_dir``: find, verify, seal, link, quarantine, prune.

Trainer-neutral: a trainer's ``CheckpointLayout`` (engine/trainers/base.py) says which direct
children of out_dir are checkpoints, which file in one is resumed from, which files a complete one
has and how to check the trainer's own format; this module adds a sha256 manifest, the ``last``
link, quarantine and pruning. It looks only at direct children and never leaves temporaries a
trainer could take for a checkpoint: every temp name runbook makes in an out_dir starts with
``own_tmp_prefix(out_dir)`` = ``tmp-runbook-<token of that out_dir>-`` (temp files end in ``.part``),
so a leftover of ours is told apart from anybody else's ``tmp*`` (partial_saves.py).

Pure planning functions: ``newest_verified``, ``plan_prune``. Everything else touches files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from engine.core.bounded_read import read_json_record, without_name
from engine.core.durable import atomic_write, fsync_dir
from engine.core.errors import SourceError
from engine.core.file_hash import sha256_file

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
    return sorted(e.name for e in _scandir(Path(folder))
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


def _scandir(path: Path) -> list[os.DirEntry]:
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
    return sorted(e.name for e in _scandir(Path(out_dir))
                  if e.is_dir(follow_symlinks=False) and another_runs_out_dir(Path(out_dir) / e.name))


def list_checkpoints(out_dir: Path, layout: CheckpointLayout) -> list[Checkpoint]:
    """Direct children the layout names step checkpoints, oldest first; ``[]`` if out_dir is missing.
    Another run's out_dir is never one, whatever its name."""
    out_dir = Path(out_dir)
    found = [
        Checkpoint(path=out_dir / e.name, step=step, layout=layout)
        for e in _scandir(out_dir)
        if (step := layout.step_of(e.name)) is not None and e.is_dir(follow_symlinks=False)
        and not another_runs_out_dir(out_dir / e.name)
    ]
    return sorted(found, key=lambda c: (c.step, c.path.name))


# --- verification without unpickling ---------------------------------------------------------


def _manifest_files(ckpt: Checkpoint) -> list[str]:
    """Regular files of the folder, minus the manifest and our temporaries."""
    prefix = own_tmp_prefix(ckpt.path.parent)
    return sorted(
        e.name
        for e in os.scandir(ckpt.path)
        if e.is_file(follow_symlinks=False) and e.name != MANIFEST_NAME and not e.name.startswith(prefix)
    )


MIN_SIDE_FILE_CAP = 256 * 2**20   # a manifest entry other than the resume file: at most this, or the resume file's size


def _entry_problem(ckpt: Checkpoint, name: object, expected: dict) -> str | None:
    """Why a manifest entry is refused before it is opened, or None. Entries are the folder's own
    regular files (write_manifest lists nothing else): a path (`/etc/hostname`, `../../x`), a
    symlink, a FIFO or device, or a side file larger than the cap (a sparse 50 GB file would keep
    verify hashing for minutes) make the manifest bad; none of them is read or hashed."""
    if (not isinstance(name, str) or name in ("", ".", "..", MANIFEST_NAME) or "/" in name or "\\" in name
            or "\x00" in name or len(name) > 255):
        return f"{MANIFEST_NAME} is bad: entry {str(name)[:80]!r} is not a file name inside the checkpoint folder"
    try:
        info = os.lstat(ckpt.path / name)
    except FileNotFoundError:
        return f"{name} is listed in {MANIFEST_NAME} but missing"
    except OSError as err:
        return f"{MANIFEST_NAME} is bad: entry {name!r} cannot be examined ({err.strerror})"
    except ValueError:   # UnicodeEncodeError: JSON can hold a lone surrogate ("\ud800"), which no path can
        return f"{MANIFEST_NAME} is bad: entry {name!r} is not a name a file can have"
    if stat.S_ISLNK(info.st_mode):
        return f"{MANIFEST_NAME} is bad: entry {name!r} is a symlink (a checkpoint's files are its own)"
    if not stat.S_ISREG(info.st_mode):
        return f"{MANIFEST_NAME} is bad: entry {name!r} is not a regular file"
    if name != ckpt.resume_file.name:
        try:
            cap = max(MIN_SIDE_FILE_CAP, os.stat(ckpt.resume_file).st_size)
        except OSError:
            cap = MIN_SIDE_FILE_CAP
        if info.st_size > cap:
            return (f"{MANIFEST_NAME} is bad: entry {name!r} is {info.st_size:,} bytes, more than the "
                    f"{cap:,} a side file may have (not hashed)")
    return None


def _verify(ckpt: Checkpoint, require_side_files: Collection[str] | None, want_digests: bool) -> tuple[Verification, dict]:
    """verify_checkpoint, optionally also returning {name: {"size", "sha256"}} for sealing."""
    resume_file = ckpt.resume_file
    if require_side_files is None:
        require_side_files = ckpt.layout.required_files
    if not resume_file.is_file():
        return Verification(False, f"{resume_file.name} is missing"), {}
    if resume_file.stat().st_size == 0:
        return Verification(False, f"{resume_file.name} is empty (0 bytes)"), {}
    if missing := [n for n in require_side_files if not (ckpt.path / n).is_file()]:
        return Verification(False, f"missing side file(s): {', '.join(missing)}"), {}

    manifest = None
    if (ckpt.path / MANIFEST_NAME).exists():
        try:
            manifest = read_json_record(ckpt.path / MANIFEST_NAME, name=MANIFEST_NAME)["files"]   # bounded: 100,000 `[` is one sentence
            if not isinstance(manifest, dict) or not all(isinstance(v, dict) for v in manifest.values()):
                raise ValueError("'files' is not an object of objects")
        except SourceError as e:   # "... is unreadable: not a usable JSON record: nested too deeply"
            return Verification(False, f"{MANIFEST_NAME} is unreadable: {without_name(e, MANIFEST_NAME)}"), {}
        except (OSError, ValueError, KeyError, TypeError) as e:
            return Verification(False, f"{MANIFEST_NAME} is unreadable: {type(e).__name__}: {e}"), {}

    need_sha = want_digests or (manifest is not None and resume_file.name in manifest)
    problem, read_whole = ckpt.layout.scan(ckpt.path, want_sha256=need_sha)
    if problem:
        return Verification(False, problem), {}

    def sha(name: str) -> str:
        return read_whole[name] if name in read_whole else sha256_file(ckpt.path / name)

    digests = {}
    if want_digests:
        digests = {n: {"size": (ckpt.path / n).stat().st_size, "sha256": sha(n)} for n in _manifest_files(ckpt)}
    for name, expected in sorted((manifest or {}).items()):
        if problem := _entry_problem(ckpt, name, expected):   # before anything opens it
            return Verification(False, problem), {}
        p = ckpt.path / name
        if (size := p.stat().st_size) != expected.get("size"):
            return Verification(False, f"{name} size {size} != {expected.get('size')} in {MANIFEST_NAME}"), {}
        actual_sha = digests[name]["sha256"] if name in digests else sha(name)
        if actual_sha != expected.get("sha256"):
            return Verification(False, f"{name} sha256 differs from {MANIFEST_NAME} (modified after sealing)"), {}
    return Verification(True, None), digests


def verify_checkpoint(ckpt: Checkpoint, require_side_files: Collection[str] | None = None) -> Verification:
    """Without loading it: the resume file present and non-empty, the layout's required files
    present (or require_side_files), the layout's own check of its format (litgpt: every zip
    member's CRC) and, if a manifest exists, every listed file's size and sha256 as recorded."""
    return _verify(ckpt, require_side_files, want_digests=False)[0]


def _write_manifest_entries(ckpt: Checkpoint, files: dict) -> Path:
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    data = json.dumps({"format": 1, "step": ckpt.step, "created_utc": created, "files": files}, indent=1)
    dst = ckpt.path / MANIFEST_NAME
    atomic_write(dst, lambda f: f.write(data.encode() + b"\n"), prefix=own_tmp_prefix(ckpt.path.parent))
    return dst


def write_manifest(ckpt: Checkpoint) -> Path:
    """Record size and sha256 of every regular file in the folder. Call only after verify passes;
    seal_checkpoint does both with one read of the resume file."""
    files = {n: {"size": (ckpt.path / n).stat().st_size, "sha256": sha256_file(ckpt.path / n)}
             for n in _manifest_files(ckpt)}
    return _write_manifest_entries(ckpt, files)


def verify_for_sealing(ckpt: Checkpoint, require_side_files: Collection[str] | None = None) -> tuple[Verification, dict]:
    """verify_checkpoint, plus the digests write_seal records: a caller that may find no room for the
    manifest (a full disk) keeps them and seals later without reading the checkpoint again."""
    return _verify(ckpt, require_side_files, want_digests=True)


def write_seal(ckpt: Checkpoint, digests: dict) -> Path:
    """The manifest of a checkpoint verify_for_sealing passed, from the digests of that read."""
    return _write_manifest_entries(ckpt, digests)


def seal_checkpoint(ckpt: Checkpoint, require_side_files: Collection[str] | None = None) -> Verification:
    """Verify, and only if that passes write the manifest from the hashes of the same read. An
    existing manifest is checked first and rewritten only if it still holds."""
    result, digests = verify_for_sealing(ckpt, require_side_files)
    if result.ok:
        write_seal(ckpt, digests)
    return result


def suspect_reason(ckpt: Checkpoint) -> str | None:
    """Why runbook no longer trusts this checkpoint (its manifest's `suspect`, mark_suspect), or None: unmarked,
    unsealed, or a manifest it cannot read (verify says what is wrong with that)."""
    try:
        record = read_json_record(ckpt.path / MANIFEST_NAME, name=MANIFEST_NAME)
    except (OSError, SourceError):
        return None
    suspect = record.get("suspect") if isinstance(record, dict) else None
    reason = suspect.get("reason") if isinstance(suspect, dict) else None
    return reason if isinstance(reason, str) else None


def quarantined_suspects(quarantine_dir: Path, limit: int = 1000) -> list[tuple[str, str]]:
    """(folder name, why) of the checkpoints moved to the quarantine as suspect (mark_suspect's manifests), by name;
    at most `limit` folders are looked at (a quarantine is the run's own, but may be large)."""
    try:
        folders = sorted(e.name for e in _scandir(Path(quarantine_dir)) if e.is_dir(follow_symlinks=False))[:limit]
    except OSError:
        return []
    found = []
    for name in folders:
        try:
            record = read_json_record(Path(quarantine_dir) / name / MANIFEST_NAME, name=MANIFEST_NAME)
        except (OSError, SourceError):
            continue
        suspect = record.get("suspect") if isinstance(record, dict) else None
        if isinstance(suspect, dict) and isinstance(suspect.get("reason"), str):
            found.append((name, suspect["reason"]))
    return found


def mark_suspect(ckpt: Checkpoint, reason: str) -> bool:
    """Record in the checkpoint's manifest why it is suspect: its files stay where they are (a human may still
    want them), runbook only stops resuming from it. False: it has no readable manifest to mark (unsealed)."""
    try:
        record = read_json_record(ckpt.path / MANIFEST_NAME, name=MANIFEST_NAME)
    except (OSError, SourceError):
        return False
    if not isinstance(record, dict):
        return False
    record["suspect"] = {"reason": reason, "marked_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    data = json.dumps(record, indent=1).encode() + b"\n"
    atomic_write(ckpt.path / MANIFEST_NAME, lambda f: f.write(data), prefix=own_tmp_prefix(ckpt.path.parent))
    return True


def has_manifest(ckpt: Checkpoint) -> bool:
    return (ckpt.path / MANIFEST_NAME).is_file()


def newest_verified(checkpoints: list[Checkpoint], verified_steps: set[int]) -> Checkpoint | None:
    """PURE. The highest-step checkpoint whose step is in verified_steps."""
    return max((c for c in checkpoints if c.step in verified_steps), key=lambda c: c.step, default=None)


# --- the `last` link, quarantine, leftovers, pruning ------------------------------------------


def last_in_the_way(out_dir: Path) -> str | None:
    """Why ``out_dir/last`` cannot be runbook's link (something else has that name: a folder, a file), or None.
    Renaming the link over it would fail on a folder (IsADirectoryError) and delete a file."""
    link = Path(out_dir) / LAST_LINK_NAME
    if not os.path.lexists(link) or link.is_symlink():
        return None
    kind = "a folder" if link.is_dir() else "a file"
    return (f"{link} is {kind}, not runbook's `last` link: runbook never moves or deletes it, and cannot keep "
            f"`last` pointing at the newest checkpoint while it is there. Rename or move it out of {out_dir}")


def update_last_link(out_dir: Path, ckpt: Checkpoint) -> bool:
    """Point ``out_dir/last`` at ckpt's folder: relative (out_dir may be moved or mounted
    elsewhere), made at a temp name and renamed over the old link, so it never is absent. False (nothing
    changed) where a folder or file of someone else's is named ``last`` (last_in_the_way): it stays as it is."""
    out_dir = Path(out_dir)
    if last_in_the_way(out_dir) is not None:
        return False
    if not ckpt.path.is_dir():
        raise FileNotFoundError(f"checkpoint folder {ckpt.path} does not exist")
    target = os.path.relpath(os.path.abspath(ckpt.path), os.path.abspath(out_dir))
    tmp = out_dir / f"{own_tmp_prefix(out_dir)}last-{uuid.uuid4().hex[:12]}"
    os.symlink(target, tmp)
    try:
        os.replace(tmp, out_dir / LAST_LINK_NAME)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(out_dir)
    return True


def last_link_target(out_dir: Path) -> Path | None:
    """The absolute folder ``out_dir/last`` names (it may no longer exist), or None."""
    link = Path(out_dir) / LAST_LINK_NAME
    if not link.is_symlink():
        return None
    return Path(os.path.normpath(os.path.join(os.path.abspath(out_dir), os.readlink(link))))


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


def final_exists(out_dir: Path, layout: CheckpointLayout) -> bool:
    """Has the trainer saved its final checkpoint (the end of a finished run)?"""
    return layout.final_name is not None and layout.resume_file(Path(out_dir) / layout.final_name).is_file()
