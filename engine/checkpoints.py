"""Checkpoints of a litgpt ``out_dir``: find, verify, seal, link, quarantine, prune, rescale.

litgpt writes ``out_dir/step-XXXXXXXX/lit_model.pth`` (XXXXXXXX = optimizer ``step_count``) plus
side files. ``--resume auto`` takes the highest ``out_dir.rglob("step-*/*.pth")``: it recurses and
checks nothing. So this module looks only at direct children, verifies files without unpickling
them, and never leaves ``step-*/*.pth``-shaped temporaries: every temp name runbook makes in an
out_dir starts with ``own_tmp_prefix(out_dir)`` = ``tmp-runbook-<token of that out_dir>-`` (temp files
end in ``.part``), so a leftover of ours is told apart from anybody else's ``tmp*`` (partial_saves.py).

Pure planning functions: ``newest_verified``, ``plan_prune``. Everything else touches files.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import uuid
import zipfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from engine.pth_scan import scan_pth, sha256_file
from engine.durable import atomic_write, fsync_dir

PTH_NAME = "lit_model.pth"
MANIFEST_NAME = "runbook-manifest.json"
REQUIRED_SIDE_FILES = ("model_config.yaml", "hyperparameters.yaml")
QUARANTINE_REASON_NAME = "QUARANTINE_REASON.txt"
LAST_LINK_NAME = "last"
OWN_TMP_PREFIX = "tmp-runbook-"  # + a token per out_dir: see own_tmp_prefix
STEP_DIR_RE = re.compile(r"^step-(\d+)$")
# Every file litgpt 0.5.13's save_checkpoint puts in a step-*/final folder (fabric.save, save_hyperparameters,
# copy_config_files, save_config), plus our manifest. A folder holding anything else is not all ours.
CHECKPOINT_FILES = frozenset({PTH_NAME, MANIFEST_NAME, "hyperparameters.yaml", "model_config.yaml", "config.json",
                              "generation_config.json", "tokenizer.json", "tokenizer.model", "tokenizer_config.json"})


def own_tmp_prefix(out_dir: Path) -> str:
    """``tmp-runbook-<token>-``: the token is fixed by out_dir's real path, so a leftover of ours is
    recognised after a watcher restart and another tool's (or another out_dir's) ``tmp-runbook-*`` is not."""
    token = hashlib.sha256(os.path.realpath(out_dir).encode()).hexdigest()[:10]
    return f"{OWN_TMP_PREFIX}{token}-"


def foreign_files(folder: Path) -> list[str]:
    """Names in a checkpoint folder that neither litgpt's save nor runbook writes (sorted)."""
    prefix = own_tmp_prefix(Path(folder).parent)
    return sorted(e.name for e in _scandir(Path(folder))
                  if not (e.name in CHECKPOINT_FILES and e.is_file(follow_symlinks=False)) and not e.name.startswith(prefix))


@dataclass(frozen=True)
class Checkpoint:
    path: Path  # the step-XXXXXXXX folder
    step: int  # optimizer step from the folder name

    @property
    def pth(self) -> Path:
        """The file ``--resume`` needs (a folder gives IsADirectoryError)."""
        return self.path / PTH_NAME

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


def list_checkpoints(out_dir: Path) -> list[Checkpoint]:
    """Direct children named ``step-<digits>``, oldest first; ``[]`` if out_dir is missing."""
    out_dir = Path(out_dir)
    found = [
        Checkpoint(path=out_dir / e.name, step=int(m.group(1)))
        for e in _scandir(out_dir)
        if (m := STEP_DIR_RE.match(e.name)) and e.is_dir(follow_symlinks=False)
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


def _verify(ckpt: Checkpoint, require_side_files, want_digests: bool) -> tuple[Verification, dict]:
    """verify_checkpoint, optionally also returning {name: {"size", "sha256"}} for sealing."""
    pth = ckpt.pth
    if not pth.is_file():
        return Verification(False, f"{PTH_NAME} is missing"), {}
    if pth.stat().st_size == 0:
        return Verification(False, f"{PTH_NAME} is empty (0 bytes)"), {}
    # A SIGTERM right after "Saving checkpoint to" leaves a complete .pth without its yaml files.
    if missing := [n for n in require_side_files if not (ckpt.path / n).is_file()]:
        return Verification(False, f"missing side file(s): {', '.join(missing)}"), {}

    manifest = None
    if (ckpt.path / MANIFEST_NAME).exists():
        try:
            manifest = json.loads((ckpt.path / MANIFEST_NAME).read_text())["files"]
            if not isinstance(manifest, dict) or not all(isinstance(v, dict) for v in manifest.values()):
                raise ValueError("'files' is not an object of objects")
        except (OSError, ValueError, KeyError, TypeError) as e:
            return Verification(False, f"{MANIFEST_NAME} is unreadable: {type(e).__name__}: {e}"), {}

    need_sha = want_digests or (manifest is not None and PTH_NAME in manifest)
    problem, pth_sha = scan_pth(pth, want_sha256=need_sha)
    if problem:
        return Verification(False, problem), {}

    def sha(name: str) -> str:
        return pth_sha if name == PTH_NAME else sha256_file(ckpt.path / name)

    digests = {}
    if want_digests:
        digests = {n: {"size": (ckpt.path / n).stat().st_size, "sha256": sha(n)} for n in _manifest_files(ckpt)}
    for name, expected in sorted((manifest or {}).items()):
        p = ckpt.path / name
        if not p.is_file():
            return Verification(False, f"{name} is listed in {MANIFEST_NAME} but missing"), {}
        if (size := p.stat().st_size) != expected.get("size"):
            return Verification(False, f"{name} size {size} != {expected.get('size')} in {MANIFEST_NAME}"), {}
        actual_sha = digests[name]["sha256"] if name in digests else sha(name)
        if actual_sha != expected.get("sha256"):
            return Verification(False, f"{name} sha256 differs from {MANIFEST_NAME} (modified after sealing)"), {}
    return Verification(True, None), digests


def verify_checkpoint(ckpt: Checkpoint, require_side_files=REQUIRED_SIDE_FILES) -> Verification:
    """Without unpickling: pth present, non-empty, a zip whose members all pass their CRC, side
    files present and, if a manifest exists, every listed file's size and sha256 as recorded."""
    return _verify(ckpt, require_side_files, want_digests=False)[0]


def _write_manifest_entries(ckpt: Checkpoint, files: dict) -> Path:
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    data = json.dumps({"format": 1, "step": ckpt.step, "created_utc": created, "files": files}, indent=1)
    dst = ckpt.path / MANIFEST_NAME
    atomic_write(dst, lambda f: f.write(data.encode() + b"\n"), prefix=own_tmp_prefix(ckpt.path.parent))
    return dst


def write_manifest(ckpt: Checkpoint) -> Path:
    """Record size and sha256 of every regular file in the folder. Call only after verify passes;
    seal_checkpoint does both with one read of lit_model.pth."""
    files = {n: {"size": (ckpt.path / n).stat().st_size, "sha256": sha256_file(ckpt.path / n)}
             for n in _manifest_files(ckpt)}
    return _write_manifest_entries(ckpt, files)


def seal_checkpoint(ckpt: Checkpoint, require_side_files=REQUIRED_SIDE_FILES) -> Verification:
    """Verify, and only if that passes write the manifest from the hashes of the same read. An
    existing manifest is checked first and rewritten only if it still holds."""
    result, digests = _verify(ckpt, require_side_files, want_digests=True)
    if result.ok:
        _write_manifest_entries(ckpt, digests)
    return result


def has_manifest(ckpt: Checkpoint) -> bool:
    return (ckpt.path / MANIFEST_NAME).is_file()


def newest_verified(checkpoints: list[Checkpoint], verified_steps: set[int]) -> Checkpoint | None:
    """PURE. The highest-step checkpoint whose step is in verified_steps."""
    return max((c for c in checkpoints if c.step in verified_steps), key=lambda c: c.step, default=None)


# --- the `last` link, quarantine, leftovers, pruning ------------------------------------------


def update_last_link(out_dir: Path, ckpt: Checkpoint) -> None:
    """Point ``out_dir/last`` at ckpt's folder: relative (out_dir may be moved or mounted
    elsewhere), made at a temp name and renamed over the old link, so it never is absent."""
    out_dir = Path(out_dir)
    if not ckpt.path.is_dir():
        raise FileNotFoundError(f"checkpoint folder {ckpt.path} does not exist")
    target = os.path.relpath(os.path.abspath(ckpt.path), os.path.abspath(out_dir))
    tmp = out_dir / f"{own_tmp_prefix(out_dir)}last-{uuid.uuid4().hex[:12]}"
    os.symlink(target, tmp)
    try:
        os.replace(tmp, out_dir / LAST_LINK_NAME)  # fails if `last` is a real directory
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(out_dir)


def last_link_target(out_dir: Path) -> Path | None:
    """The absolute folder ``out_dir/last`` names (it may no longer exist), or None."""
    link = Path(out_dir) / LAST_LINK_NAME
    if not link.is_symlink():
        return None
    return Path(os.path.normpath(os.path.join(os.path.abspath(out_dir), os.readlink(link))))


def quarantine(ckpt: Checkpoint, quarantine_dir: Path, reason: str) -> Path:
    """Move ckpt's folder to ``quarantine_dir/<name>-<UTC timestamp>`` with QUARANTINE_REASON.txt.

    quarantine_dir must lie outside out_dir (ValueError otherwise): litgpt's ``--resume auto``
    searches recursively and would resume from a quarantined ``step-*`` folder. Never deletes (across
    filesystems the move is copy, then remove the source). If ``out_dir/last`` pointed here it now
    dangles: the CALLER re-points it, e.g. ``update_last_link(out_dir, newest_verified(...))``.
    """
    out_dir = ckpt.path.parent
    if Path(quarantine_dir).resolve().is_relative_to(out_dir.resolve()):
        raise ValueError(f"quarantine_dir {quarantine_dir} is inside out_dir {out_dir}: litgpt would resume from it")
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


def is_zip(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path):  # central directory only: cheap, catches truncation
            return True
    except (zipfile.BadZipFile, EOFError, OSError):
        return False


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


def apply_prune(out_dir: Path, doomed: list[Checkpoint], announced: frozenset[str] | set[str]) -> int:
    """Delete the doomed folders; return bytes freed. Refuses all (ValueError, nothing deleted) if
    any is not a direct ``step-*`` child of out_dir, was not announced by this run's trainer (see
    partial_saves.read_announced), holds a file litgpt and runbook do not write, is the newest
    checkpoint with a manifest (the last verified one), or is where ``out_dir/last`` points."""
    out_dir = Path(out_dir)
    root, last = out_dir.resolve(), last_link_target(out_dir)
    sealed = [c for c in list_checkpoints(out_dir) if has_manifest(c)]
    newest_sealed = sealed[-1].path.resolve() if sealed else None
    for c in doomed:
        p = Path(c.path)
        if p.is_symlink() or p.resolve().parent != root or not STEP_DIR_RE.match(p.name):
            raise ValueError(f"refusing to delete {p}: not a step-* folder directly inside {out_dir}")
        if p.name not in announced:
            raise ValueError(f"refusing to delete {p}: this run's trainer never announced saving it")
        if foreign := foreign_files(p):
            raise ValueError(f"refusing to delete {p}: it holds file(s) runbook did not write: {', '.join(foreign)}")
        if p.resolve() == newest_sealed:
            raise ValueError(f"refusing to delete {p}: it is the newest checkpoint with a manifest")
        if last is not None and last.resolve() == p.resolve():
            raise ValueError(f"refusing to delete {p}: {LAST_LINK_NAME} points at it")
    freed = 0
    for c in doomed:
        if c.path.exists():
            freed += c.size_bytes()
            # Rename first so litgpt's `step-*/*.pth` search never sees a half-deleted folder.
            trash = out_dir / f"{own_tmp_prefix(out_dir)}prune-{c.path.name}-{uuid.uuid4().hex[:8]}"
            os.rename(c.path, trash)
            shutil.rmtree(trash)
    return freed


# --- loading: weights_only, so a checkpoint file cannot run code -----------------------------


def _load(pth: Path) -> dict:
    # weights_only=True was checked on a real litgpt 0.5.13 pretrain checkpoint (model, AdamW
    # state, litdata StreamingDataLoader state of ints/strs/lists/tuples/None). If a later version
    # stores another type, torch raises UnpicklingError naming it: allow just that type with
    # torch.serialization.add_safe_globals([...]); do not fall back to weights_only=False.
    # mmap=True pages tensors in on use, so reading two ints does not read the whole file.
    import torch  # deferred: importing torch costs ~1 s and most callers here never load

    return torch.load(pth, map_location="cpu", weights_only=True, mmap=True)


def read_progress(pth: Path) -> dict:
    state = _load(pth)
    return {"iter_num": int(state["iter_num"]), "step_count": int(state["step_count"])}


def rescaled_copy(src_pth: Path, dst_pth: Path, iter_num_factor: float) -> dict:
    """Copy src with iter_num multiplied by iter_num_factor (old_mb / new_mb when micro_batch_size
    changes on resume; see FINDINGS.md); step_count, weights, optimizer and loader state unchanged.
    The source is never modified. Checked: litgpt resumes from the copy (--resume <copy>)."""
    import torch

    src_pth, dst_pth = Path(src_pth), Path(dst_pth)
    if os.path.abspath(src_pth) == os.path.abspath(dst_pth) or (dst_pth.exists() and dst_pth.samefile(src_pth)):
        raise ValueError("dst_pth must differ from src_pth (the source is never modified)")
    if not 0 < iter_num_factor < float("inf"):
        raise ValueError(f"iter_num_factor must be a positive finite number, got {iter_num_factor}")
    state = _load(src_pth)
    before = int(state["iter_num"])
    # limit_denominator: 4/3 arrives as 1.3333333333333333; micro-batch ratios are small fractions.
    after = Fraction(before) * Fraction(iter_num_factor).limit_denominator(1_000_000)
    if after.denominator != 1:
        raise ValueError(f"iter_num {before} x {iter_num_factor} = {float(after)} is not an integer")
    state["iter_num"] = int(after)
    dst_pth.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(dst_pth, lambda f: torch.save(state, f), prefix=OWN_TMP_PREFIX)  # .part temp: never matches step-*/*.pth
    return {"iter_num_before": before, "iter_num_after": int(after), "step_count": int(state["step_count"])}


def find_nonfinite_tensors(pth: Path, limit: int = 10) -> list[str]:
    """Names of model tensors holding NaN/Inf, at most ``limit`` (optimizer state is not scanned)."""
    import torch

    bad = []
    for name, t in _load(pth)["model"].items():
        floating = isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())
        if floating and not torch.isfinite(t).all():
            bad.append(name)
            if len(bad) >= limit:
                break
    return bad
