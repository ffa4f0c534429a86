"""Pure checks of training text: which lines of a block are bad, and which need the tokenizer.

A line is the bytes between two b"\\n" (a trailing b"\\r" belongs to the terminator). The checks
work on a whole chunk of complete lines with C-level bytes operations (decode, translate, split,
count) instead of a Python loop per line; `LongLine` gives the same verdict for one line too long to
hold, fed piece by piece. Nothing here reads a file or calls a tokenizer.
"""

from __future__ import annotations

import codecs
import re
from itertools import compress, count
from typing import Iterator

from engine.datascan.tokens import TokenBounds

BATCH_LINES, BATCH_BYTES = 1024, 4 << 20
CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)")  # the per-line reference's test
LONE_CR = re.compile(rb"\r(?!\n)")
# Deleting every byte that is not a C0 control or DEL leaves only the controls: a cheap "any?" test.
_NOT_CONTROL = bytes(b for b in range(256) if not (b < 32 or b == 127))

Found = tuple[int, str, str]  # (index of the line in its chunk, kind, detail)


def utf8_detail(byte: int, column: int) -> str:
    return f"invalid UTF-8 byte 0x{byte:02x} at column {column}"


def control_detail(byte: int, column: int) -> str:
    return f"control character U+{byte:04X} at column {column}"


class _LineOf:
    """Line index of increasing byte offsets in a chunk, counting newlines incrementally (O(chunk))."""

    def __init__(self, chunk: bytes):
        self.chunk, self.pos, self.line = chunk, 0, 0

    def __call__(self, offset: int) -> tuple[int, int]:
        self.line += self.chunk.count(b"\n", self.pos, offset)
        self.pos = offset
        return self.line, offset - self.chunk.rfind(b"\n", 0, offset)  # (index, 1-based column)


def invalid_utf8(chunk: bytes, lines: list[bytes]) -> list[tuple[int, str]]:
    """(line index, detail) of each line that is not UTF-8, at its first bad byte."""
    found: list[tuple[int, str]] = []
    pos, line_of, view = 0, _LineOf(chunk), memoryview(chunk)
    for _ in range(8):  # sparse errors: one C-level decode of the rest of the chunk after each
        try:
            codecs.utf_8_decode(view[pos:], "strict", True)
            return found
        except UnicodeDecodeError as err:
            index, column = line_of(pos + err.start)
            found.append((index, utf8_detail(chunk[pos + err.start], column)))
            pos = chunk.find(b"\n", pos + err.start) + 1
            if pos == 0:
                return found
    for start in range(found[-1][0] + 1, len(lines), 1024):  # dense errors: blocks, then lines; linear
        try:
            b"\n".join(lines[start:start + 1024]).decode()
            continue
        except UnicodeDecodeError:
            pass
        for index in range(start, min(start + 1024, len(lines))):
            try:
                lines[index].decode()
            except UnicodeDecodeError as err:
                found.append((index, utf8_detail(lines[index][err.start], err.start + 1)))
    return found


def control_chars(chunk: bytes) -> list[tuple[int, str]]:
    """(line index, detail) of each line with a control character, at its first one."""
    present = set(chunk.translate(None, _NOT_CONTROL).translate(None, b"\n\t"))
    lone_cr = 13 in present and chunk.count(b"\r") != chunk.count(b"\r\n")  # CRLF endings are fine
    present.discard(13)
    if not present and not lone_cr:
        return []
    hits = [m.start() for m in LONE_CR.finditer(chunk)] if lone_cr else []
    for byte in present:  # memchr per control byte, jumping to the next line after each hit
        needle, pos = bytes([byte]), chunk.find(bytes([byte]))
        while pos >= 0:
            hits.append(pos)
            end = chunk.find(b"\n", pos)
            pos = chunk.find(needle, end + 1) if end >= 0 else -1
    found: list[tuple[int, str]] = []
    line_of = _LineOf(chunk)
    for pos in sorted(hits):
        index, column = line_of(pos)
        if not found or found[-1][0] != index:  # one finding per line, at its first control char
            found.append((index, control_detail(chunk[pos], column)))
    return found


def certain_finding(nbytes: int, bounds: TokenBounds | None, max_tokens: int, max_line_bytes: int) -> tuple[str, str] | None:
    """A too_long verdict from a line's length alone, or None when only the tokenizer can tell."""
    if bounds and bounds.lower(nbytes) > max_tokens:  # certainly over: don't spend seconds on it
        return "too_long", f"at least {bounds.lower(nbytes):,} tokens ({nbytes:,} bytes) > limit {max_tokens:,}"
    if nbytes > max_line_bytes:  # tokenizing it would take seconds and gigabytes; no trainer wants it
        return "too_long", f"{nbytes:,} bytes, more than the {max_line_bytes:,} a line may have (not tokenized)"
    return None


def plan_tokens(lines: list[bytes], skip: set[int], bounds: TokenBounds | None, max_tokens: int,
                context_length: int | None, max_line_bytes: int) -> tuple[list[Found], list[int]]:
    """Split the lines that could be over a limit into those decided by length and those to tokenize.

    With bounds only lines longer than the limit can be over it; without, every non-empty line is
    tokenized. Lines in `skip` (not UTF-8) cannot be tokenized at all.
    """
    limit = min(max_tokens, context_length or max_tokens)
    if bounds is None:
        candidates = [i for i, ln in enumerate(lines) if ln and ln != b"\r"]
    else:
        candidates = list(compress(count(), map((limit - bounds.slack).__lt__, map(len, lines))))
    found: list[Found] = []
    to_encode: list[int] = []
    for i in candidates:
        if i in skip:
            continue
        if hit := certain_finding(len(lines[i].removesuffix(b"\r")), bounds, max_tokens, max_line_bytes):
            found.append((i, *hit))
        else:
            to_encode.append(i)
    return found, to_encode


def batches(indices: list[int], lines: list[bytes]) -> Iterator[list[int]]:
    """Groups of line indices small enough for one encode_batch call."""
    batch, size = [], 0
    for i in indices:
        batch.append(i)
        size += len(lines[i])
        if len(batch) >= BATCH_LINES or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def empty_lines(lines: list[bytes], room: int) -> tuple[list[int], int]:
    """Indices of the first `room` empty lines (nothing, or a lone b"\\r"), and how many there are."""
    total = lines.count(b"") + lines.count(b"\r")
    positions: list[int] = []
    for empty in (b"", b"\r"):  # line numbers only while the info list has room
        i = -1
        for _ in range(room):
            try:
                i = lines.index(empty, i + 1)
            except ValueError:
                break
            positions.append(i)
    return sorted(positions)[:room], total


class LongLine:
    """One line too long to hold in memory, fed in pieces: the verdicts the chunk checks give a line.

    Its first bad UTF-8 byte and first control character, with their columns, and too_long from its
    length (it is never tokenized). A b"\\r" at the end of a piece is decided by what follows: more of
    the line makes it a lone CR, the line's newline makes it part of a CRLF.
    """

    def __init__(self) -> None:
        self.nbytes = 0             # bytes so far, without the newline
        self.terminated = False
        self._utf8_tail = b""       # an incomplete UTF-8 sequence at the end of the last piece
        self._ends_cr = False       # the last piece ended with b"\r"
        self.invalid: tuple[int, int] | None = None   # (column, byte) of the first bad UTF-8 byte
        self.control: tuple[int, int] | None = None   # (column, byte) of the first control character

    def feed(self, piece: bytes) -> None:
        if not piece:
            return
        if self.control is None:
            if self._ends_cr:  # more of the line follows the b"\r" that ended the last piece: lone
                self.control = (self.nbytes, 13)
            elif (match := CONTROL.search(piece)) and not (match.end() == len(piece) and piece[-1] == 13):
                self.control = (self.nbytes + match.start() + 1, piece[match.start()])
        if self.invalid is None:
            self._decode(self._utf8_tail + piece, final=False)
        self.nbytes += len(piece)
        self._ends_cr = piece[-1] == 13

    def finish(self, terminated: bool) -> "LongLine":
        """The line ended: with a newline, or at the end of the file (a final b"\\r" is then lone)."""
        if self.invalid is None and self._utf8_tail:
            self._decode(self._utf8_tail, final=True)
        if self.control is None and self._ends_cr and not terminated:
            self.control = (self.nbytes, 13)
        self.terminated = terminated
        return self

    def _decode(self, data: bytes, final: bool) -> None:
        start = self.nbytes - len(self._utf8_tail)  # where `data` begins in the line
        try:
            _, used = codecs.utf_8_decode(data, "strict", final)
            self._utf8_tail = data[used:]
        except UnicodeDecodeError as err:
            self.invalid = (start + err.start + 1, data[err.start])
            self._utf8_tail = b""

    def findings(self, bounds: TokenBounds | None, max_tokens: int, context_length: int | None,
                 max_line_bytes: int) -> list[tuple[str, str]]:
        """(kind, detail) in report order, as `plan_tokens` and the chunk checks would give them."""
        found = []
        if self.invalid:
            found.append(("invalid_utf8", utf8_detail(self.invalid[1], self.invalid[0])))
        if self.control:
            found.append(("control_char", control_detail(self.control[1], self.control[0])))
        limit = min(max_tokens, context_length or max_tokens)
        if not self.invalid and (bounds is None or self.nbytes > limit - bounds.slack):
            hit = certain_finding(self.nbytes - self._ends_cr, bounds, max_tokens, max_line_bytes)  # a CRLF's b"\r" is no text
            assert hit, "a LongLine is longer than max_line_bytes"
            found.append(hit)
        return found
