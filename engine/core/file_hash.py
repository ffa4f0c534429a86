"""The sha256 of a file, read in 1 MB blocks: checkpoint manifests and every trainer's scan use it."""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK = 1024 * 1024   # the read size of the checkpoint scans (a trainer layout's scan of its files)


def sha256_file(path: Path) -> str:
    h, buf = hashlib.sha256(), bytearray(BLOCK)
    view = memoryview(buf)
    with open(path, "rb") as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()
