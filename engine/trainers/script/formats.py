"""Checking a checkpoint file's own format without loading it (no torch): safetensors' header against
the file's size, torch.save's zip CRCs, JSON. Each check answers one line naming the problem, or None."""

from __future__ import annotations

import hashlib
import json
import struct
import zipfile
import zlib
from pathlib import Path

MAX_HEADER = 100 * 1024 * 1024    # safetensors' own limit on its JSON header
CHUNK = 1 << 20
# torch.save stores its zip members (1:1); a deflated one with a big ratio is a bomb, not a checkpoint: refused
# from the central directory, before a byte is inflated (a 3 MB one took the watcher's loop 29 s to read).
MAX_RATIO = 50
MAX_INFLATED = 1 << 30            # bytes inflated from one file's deflated members, at most
REFUSED = "not a checkpoint this runbook will read"


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
        except RecursionError:
            return f"{path.name}: {REFUSED}: its header is nested too deep"
        except ValueError:
            return f"{path.name}: its header is not JSON (corrupted)"
    problem = header_problem(header, 8 + length, size)
    return f"{path.name}: {problem}" if problem else None


def header_problem(header: object, data_start: int, size: int) -> str | None:
    """PURE. A safetensors header: a mapping of tensor name -> {"data_offsets": [begin, end], ...} whose last end
    is where a `size`-byte file ends."""
    if not isinstance(header, dict):
        return "its header is not a mapping (corrupted)"
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            return f"its header is malformed: tensor {name[:80]!r} has data_offsets {repr(offsets)[:40]} (corrupted)"
        end = max(end, offsets[1])
    expected = data_start + end
    if expected > size:
        return f"{size} bytes but its header describes {expected} (truncated)"
    return f"{size - expected} bytes beyond its tensors (corrupted)" if expected < size else None


def members_problem(members: list[zipfile.ZipInfo]) -> str | None:
    """PURE. What the central directory alone says runbook will not read: an encrypted member, a compression
    torch.save never writes, a deflated one past the ratio or size cap."""
    inflated = 0
    for info in members:
        name = info.filename[:120]
        if info.flag_bits & 0x1:
            return f"member {name} is encrypted"
        if info.compress_type == zipfile.ZIP_STORED:
            continue
        if info.compress_type != zipfile.ZIP_DEFLATED:
            return f"member {name} uses compression method {info.compress_type}, which torch.save never writes"
        if info.file_size > MAX_RATIO * max(info.compress_size, 1):
            return (f"member {name} inflates {info.compress_size} bytes to {info.file_size} "
                    f"(at most {MAX_RATIO}:1 is read; torch.save stores its members uncompressed)")
        inflated += info.file_size
        if inflated > MAX_INFLATED:
            return f"its deflated members inflate to more than {MAX_INFLATED} bytes"
    return None


def zip_problem(path: Path) -> str | None:
    """torch.save's format is a zip: every member's CRC must match (reads the whole file)."""
    try:
        with zipfile.ZipFile(path) as archive:
            if refused := members_problem(archive.infolist()):
                return f"{path.name}: {REFUSED}: {refused}"
            for info in archive.infolist():   # zipfile's testzip, naming the member a corrupt stream is in
                name = info.filename[:120]
                try:
                    with archive.open(info) as member:
                        while member.read(CHUNK):
                            pass
                except zipfile.BadZipFile:
                    return f"{path.name}: member {name} fails its CRC (corrupted)"
                except zlib.error as error:
                    return f"{path.name}: member {name}: its compressed data is corrupt ({str(error)[:80]})"
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, RuntimeError) as error:
        return f"{path.name}: not a readable torch file ({str(error)[:120]}; truncated?)"
    return None


def json_problem(path: Path) -> str | None:
    try:
        json.loads(path.read_bytes())
    except RecursionError:
        return f"{path.name}: not JSON this runbook will read: nested too deep"
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
