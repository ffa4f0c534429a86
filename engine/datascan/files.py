"""Reading and copying training text in bounded blocks, whatever the length of its lines.

A data set may hold a multi-gigabyte "line" (a minified blob, a file with no newlines): iterating
a binary file by lines, or collecting a line until it ends, would hold all of it in memory. Here
no read holds more than about `max_line_bytes` plus a block.
"""

from __future__ import annotations

from bisect import bisect_left
from pathlib import Path
from typing import BinaryIO, Iterator

from engine.datascan.lines import LongLine

CHUNK_BYTES = 8 << 20
COPY_BYTES = 1 << 20
MAX_LINE_BYTES = 16 << 20  # longer lines are streamed and reported, never kept whole or tokenized


def text_files(folder: Path) -> list[Path]:
    """The files a trainer reads from a data folder (litgpt TextFiles: every *.txt, not recursive)."""
    return sorted(Path(folder).glob("*.txt"))


def read_chunks(fh: BinaryIO, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes | LongLine]:
    """Blocks of about CHUNK_BYTES that end at a newline (or EOF), so no line is split; a line over
    max_line_bytes comes alone as a `LongLine`, checked as it streams past."""
    parts: list[bytes] = []
    pending = 0  # bytes of the unfinished line in parts
    long: LongLine | None = None
    while block := fh.read(CHUNK_BYTES):
        if long is not None:
            end = block.find(b"\n")
            if end < 0:
                long.feed(block)
                continue
            long.feed(block[:end])
            yield long.finish(terminated=True)
            long, block = None, block[end + 1:]
        cut = block.rfind(b"\n") + 1
        if cut == 0:  # a long line: keep collecting until it ends, or stream it once over the cap
            parts.append(block)
            pending += len(block)
            if pending > max_line_bytes + 1:  # + 1: a final b"\r" is not text, so the text is over the cap
                long = LongLine()
                for part in parts:
                    long.feed(part)
                parts, pending = [], 0
            continue
        yield b"".join(parts) + block[:cut]
        parts, pending = [block[cut:]], len(block) - cut
    if long is not None:
        yield long.finish(terminated=False)
    elif rest := b"".join(parts):
        yield rest


def copy_lines_except(src: BinaryIO, dst: BinaryIO, drop: set[int]) -> None:
    """Copy src to dst minus the lines numbered in `drop` (from 1, split on b"\\n" as the scan counts),
    byte for byte otherwise; blocks with no dropped line are copied whole."""
    bad = sorted(drop)
    line = 1  # the number of the line the next byte belongs to
    while block := src.read(COPY_BYTES):
        last = line + block.count(b"\n")  # the line the block's last byte belongs to (or the next one)
        i = bisect_left(bad, line)
        if i == len(bad) or bad[i] > last:
            dst.write(block)
        else:
            pieces = block.split(b"\n")
            for number, piece in enumerate(pieces, line):
                if number not in drop:
                    dst.write(piece + b"\n" if number < last else piece)
        line = last
