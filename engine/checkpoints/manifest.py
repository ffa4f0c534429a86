"""A checkpoint verified without unpickling, and sealed: runbook's sha256 manifest (runbook-manifest.json) of
every regular file of the folder, written only after the trainer layout's own check of its format passes, and
every listed file's size and digest checked against it later. Entries are confined to the folder's own regular
files (`_entry_problem`), so a hostile manifest makes nothing be read or hashed outside it.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Collection
from pathlib import Path

from engine.core.bounded_read import read_json_record, without_name
from engine.core.durable import atomic_write
from engine.core.errors import SourceError
from engine.core.file_hash import sha256_file

from engine.checkpoints.store import MANIFEST_NAME, Checkpoint, Verification, own_tmp_prefix


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


def has_manifest(ckpt: Checkpoint) -> bool:
    return (ckpt.path / MANIFEST_NAME).is_file()
