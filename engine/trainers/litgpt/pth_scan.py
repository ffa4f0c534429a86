"""Check a ``torch.save`` file's bytes at disk speed: the CRC32 of every zip member, and its sha256.

torch.save writes an uncompressed zip, so a member's stored bytes are its data and their CRC32 can
be computed while reading, without unpickling anything. A flipped byte inside a tensor is caught
here but not by torch.load.

Why threads: one thread that reads a block and then checksums it leaves the disk idle during the
checksum (measured at 0.62-0.71 x the disk's cold read speed for 100 MB with 4 MB reads). Here the members are split
into contiguous byte ranges, one reader per core, each checksumming its own range; the sha256,
which cannot be split, runs beside them over the file in order, trailing the CRC readers and so
mostly served from the page cache they fill. zlib.crc32 and hashlib release the GIL on large
buffers, so the threads really overlap.
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from engine.core.file_hash import sha256_file

# 1 MB reads: big enough for memory-speed checksums, small enough that the kernel's readahead of the
# next blocks overlaps the checksum (measured cold, 100 MB: 0.88 x dd with 1 MB, 0.70 with 4 MB).
BLOCK = 1024 * 1024
PARALLEL_MIN_BYTES = 32 * 1024 * 1024   # below this a thread pool costs more than it saves
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # zip local header: signature, ..., name len, extra len

Span = tuple[int, int, zipfile.ZipInfo]   # data start, data end, member


def scan_pth(pth: Path, want_sha256: bool, workers: int | None = None,
             parallel_min_bytes: int = PARALLEL_MIN_BYTES) -> tuple[str | None, str | None]:
    """CRC-check every zip member of `pth`, and optionally sha256 it.

    Returns (problem or None, sha256 hex or None); `name` in problems is the file's name.
    """
    name = pth.name
    with open(pth, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        try:
            with zipfile.ZipFile(f) as zf:  # reads only the central directory at the end
                infos = zf.infolist()
                if not any(i.filename.rsplit("/", 1)[-1] == "data.pkl" for i in infos):
                    return f"{name} has no data.pkl (not a torch.save file)", None
                if any(i.compress_type != zipfile.ZIP_STORED for i in infos):
                    if (bad := zf.testzip()) is not None:  # not torch's layout: slow general path
                        return f"{name} member {bad!r} fails its CRC (corrupted)", None
                    return None, (sha256_file(pth) if want_sha256 else None)
        except (zipfile.BadZipFile, EOFError):
            return f"{name} is not a zip archive (truncated?)", None
        spans, problem = _member_spans(f, infos, size, name)
    if problem:
        return problem, None

    if workers is None:
        workers = min(2, os.cpu_count() or 1)
    groups = split_by_bytes(spans, workers if size >= parallel_min_bytes else 1)
    if len(groups) == 1 and not want_sha256:
        return _crc_group(pth, groups[0], name), None
    with ThreadPoolExecutor(max_workers=len(groups) + want_sha256, thread_name_prefix="runbook-verify") as pool:
        sha = pool.submit(sha256_file, pth) if want_sha256 else None
        checks = [pool.submit(_crc_group, pth, group, name) for group in groups]
        problems = [c.result() for c in checks]
        digest = sha.result() if sha else None
    problem = next((p for p in problems if p), None)
    if problem is None and os.stat(pth).st_size != size:
        problem = f"{name} changed size while being read"
    return problem, (None if problem else digest)


def _member_spans(f: BinaryIO, infos: list[zipfile.ZipInfo], size: int, name: str) -> tuple[list[Span], str | None]:
    """Where each member's data lies (after its variable-length local header), in file order."""
    spans: list[Span] = []
    for info in infos:
        f.seek(info.header_offset)
        header = f.read(_LOCAL_HEADER.size)
        if len(header) < _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            return [], f"{name} member {info.filename!r} has a bad local header (corrupted)"
        _sig, name_len, extra_len = _LOCAL_HEADER.unpack(header)
        start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
        if start + info.compress_size > size:
            return [], f"{name} member {info.filename!r} runs past end of file (truncated?)"
        spans.append((start, start + info.compress_size, info))
    spans.sort(key=lambda s: s[0])
    for (_s0, e0, a), (s1, _e1, b) in zip(spans, spans[1:]):
        if s1 < e0:
            return [], f"{name} members {a.filename!r} and {b.filename!r} overlap (corrupted)"
    return spans, None


def split_by_bytes(spans: list[Span], parts: int) -> list[list[Span]]:
    """PURE. Contiguous runs of members with about equal bytes each (a member is never split)."""
    total = sum(end - start for start, end, _ in spans)
    groups: list[list[Span]] = [[]]
    done = 0
    for span in spans:
        boundary = total * len(groups) / parts
        if groups[-1] and len(groups) < parts and done >= boundary:
            groups.append([])
        groups[-1].append(span)
        done += span[1] - span[0]
    return groups


def _crc_group(pth: Path, group: list[Span], name: str) -> str | None:
    """CRC32 of each member in `group` (consecutive in the file): the first problem, or None."""
    buf = bytearray(BLOCK)
    view = memoryview(buf)
    with open(pth, "rb", buffering=0) as f:
        for start, end, info in group:
            f.seek(start)
            crc, left = 0, end - start
            while left:
                n = f.readinto(view[: min(BLOCK, left)])
                if not n:
                    return f"{name} changed size while being read"
                crc = zlib.crc32(view[:n], crc)
                left -= n
            if crc != info.CRC:
                return f"{name} member {info.filename!r} fails its CRC (corrupted)"
    return None
