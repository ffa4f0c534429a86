"""Checking a checkpoint file's own format without loading it (no torch): safetensors' header against
the file's size, torch.save's zip CRCs, JSON. Each check answers one line naming the problem, or None."""

from __future__ import annotations

import hashlib
import json
import struct
import zipfile
from pathlib import Path

MAX_HEADER = 100 * 1024 * 1024    # safetensors' own limit on its JSON header
CHUNK = 1 << 20


def safetensors_problem(path: Path) -> str | None:
    """PURE but for the read. A cut or padded file shows as a size other than its header says."""
    size = path.stat().st_size
    if size < 8:
        return f"{path.name}: {size} bytes, shorter than a safetensors header (truncated)"
    with open(path, "rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        if length > min(MAX_HEADER, size - 8):
            return f"{path.name}: header of {length} bytes in a {size}-byte file (truncated or not safetensors)"
        try:
            header = json.loads(fh.read(length))
        except ValueError:
            return f"{path.name}: its header is not JSON (corrupted)"
    if not isinstance(header, dict):
        return f"{path.name}: its header is not a mapping (corrupted)"
    ends = [v.get("data_offsets", [0, 0])[1] for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)]
    expected = 8 + length + max(ends, default=0)
    if expected != size:
        return f"{path.name}: {size} bytes but its header describes {expected} (truncated)" if size < expected else \
            f"{path.name}: {size - expected} bytes beyond its tensors (corrupted)"
    return None


def zip_problem(path: Path) -> str | None:
    """torch.save's format is a zip: every member's CRC must match (reads the whole file)."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as error:
        return f"{path.name}: not a readable torch file ({str(error)[:120]}; truncated?)"
    return f"{path.name}: member {bad} fails its CRC (corrupted)" if bad else None


def json_problem(path: Path) -> str | None:
    try:
        json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError):
        return f"{path.name}: not valid JSON (truncated or corrupted)"
    return None


CHECKS = {".safetensors": safetensors_problem, ".pt": zip_problem, ".pth": zip_problem, ".bin": zip_problem,
          ".json": json_problem}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def scan_files(files: list[Path], want_sha256: bool) -> tuple[str | None, dict[str, str]]:
    """The first problem among `files` (the CheckpointLayout.scan answer) and their sha256s when asked."""
    digests = {}
    for path in files:
        check = CHECKS.get(path.suffix)
        if check and (problem := check(path)):
            return problem, {}
        if want_sha256:
            digests[path.name] = sha256(path)
    return None, digests


def whole(path: Path) -> bool:
    """Cheap: is the file completely written, by its own format's end marker or size?"""
    try:
        if path.suffix == ".safetensors":
            return safetensors_problem(path) is None
        if path.suffix in (".pt", ".pth", ".bin"):
            with zipfile.ZipFile(path):   # the central directory is written last
                return True
        return path.is_file()
    except (OSError, zipfile.BadZipFile, struct.error, EOFError, ValueError):
        return False
