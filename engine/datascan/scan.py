"""Find bad lines in training text with the run's tokenizer (the seed's "bad data" locator), and clean them.

A line is the bytes between two b"\\n" (a trailing b"\\r" belongs to the terminator), numbered from 1,
exactly as iterating the file in binary mode yields them. Kinds of finding, in report order:

    invalid_utf8   bytes that are not UTF-8 (error)      control_char  C0 control or DEL other than \\t (error)
    encode_error   the tokenizer raised (error)          too_long      more tokens than the limit (error)
    over_context   more tokens than --context (error)    empty         an empty line; the seed skips them (info)

Speed: instead of the seed's `for line in f: tok.encode(line)` the scan works on 8 MB chunks with
C-level bytes operations and tokenizes only the lines that *could* be over a limit (see
engine/datascan/tokens.py for the bounds). A line so long that even bytes / longest-token exceeds
the limit is reported without tokenizing it; one over MAX_LINE_BYTES is never kept whole in memory.

The parts: datascan_report (kinds, findings, the report), datascan_tokens (the tokenizer and its
bounds), datascan_lines (pure checks of a chunk of lines), datascan_files (bounded reads and copies),
datascan_fix (the cleaned copy), datascan_oracle (the seed's loop). This module runs a scan and is
where callers import from.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Iterable

from engine.datascan.files import CHUNK_BYTES, MAX_LINE_BYTES, read_chunks, text_files
from engine.datascan.fix import clean_dir_for, fix_file, fix_folder
from engine.datascan.lines import LongLine, batches, control_chars, empty_lines, invalid_utf8, plan_tokens
from engine.datascan.oracle import scan_files_per_line
from engine.datascan.report import INFO_KINDS, KINDS, DataScanError, FileStats, Finding, ScanReport
from engine.datascan.tokens import (DEFAULT_MAX_TOKENS, ByteCounter, LineTokenizer, TokenBounds, counting_tokenizer,
                                    describe_bounds, encode_batch, load_tokenizer, token_bounds, token_finding)

__all__ = ["CHUNK_BYTES", "DEFAULT_MAX_TOKENS", "INFO_KINDS", "KINDS", "MAX_LINE_BYTES", "DataScanError", "FileStats",
           "Finding", "ScanReport", "TokenBounds", "clean_dir_for", "fix_file", "fix_folder", "load_tokenizer",
           "scan_files", "scan_files_per_line", "scan_folder", "text_files", "token_bounds"]


def scan_files(paths: Iterable[Path], tokenizer: LineTokenizer, max_tokens_per_line: int = DEFAULT_MAX_TOKENS,
               context_length: int | None = None, max_findings: int = 1000, max_line_bytes: int = MAX_LINE_BYTES) -> ScanReport:
    """Scan text files with a `tokenizers.Tokenizer` (or anything with encode/encode_batch)."""
    started = time.perf_counter()
    report = ScanReport(max_tokens_per_line, context_length, max_findings)
    tokenizer = counting_tokenizer(tokenizer)
    bounds = token_bounds(tokenizer)
    report.token_bound = describe_bounds(bounds)
    for path in paths:
        stats = FileStats(str(path))
        report.files.append(stats)
        with open(path, "rb") as fh:
            for chunk in read_chunks(fh, max_line_bytes):
                if isinstance(chunk, LongLine):
                    _record_long_line(chunk, bounds, report, stats, max_line_bytes)
                else:
                    _scan_chunk(chunk, tokenizer, bounds, report, stats, max_line_bytes)
    report.seconds = time.perf_counter() - started
    return report


def scan_folder(train_dir: Path, tokenizer_dir: Path, max_tokens_per_line: int = DEFAULT_MAX_TOKENS,
                context_length: int | None = None, bytes_without_tokenizer: bool = False) -> dict[str, Any]:
    """Scan every .txt in a data folder; JSON-serialisable report with a one-line `summary`. With
    bytes_without_tokenizer (a trainer that tokenizes by itself) and no tokenizer.json, lengths are in bytes."""
    train_dir = Path(train_dir)
    if not train_dir.is_dir():
        raise DataScanError(f"data folder {train_dir} does not exist")
    by_bytes = bytes_without_tokenizer and not os.path.lexists(Path(tokenizer_dir) / "tokenizer.json")
    tokenizer = ByteCounter() if by_bytes else load_tokenizer(tokenizer_dir)
    result = scan_files(text_files(train_dir), tokenizer, max_tokens_per_line, context_length).to_dict()
    if by_bytes:
        result["summary"] += " (lengths in bytes: no tokenizer.json, the trainer tokenizes by itself)"
    return result


def _scan_chunk(chunk: bytes, tokenizer: LineTokenizer, bounds: TokenBounds | None, report: ScanReport, stats: FileStats,
                max_line_bytes: int) -> None:
    lines = chunk.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the chunk ended with a newline: no line after it
    base = stats.lines + 1
    invalid = invalid_utf8(chunk, lines)
    found = [(i, "invalid_utf8", d) for i, d in invalid] + [(i, "control_char", d) for i, d in control_chars(chunk)]
    decided, to_encode = plan_tokens(lines, {i for i, _ in invalid}, bounds, report.max_tokens, report.context_length, max_line_bytes)
    found += decided
    for batch in batches(to_encode, lines):
        counts = encode_batch(tokenizer, [lines[i].removesuffix(b"\r").decode() for i in batch])
        for i, n in zip(batch, counts):
            if hit := token_finding(n, report.max_tokens, report.context_length):
                found.append((i, *hit))

    for i, kind, detail in sorted(found, key=lambda f: (f[0], KINDS.index(f[1]))):
        report.add(stats, base + i, kind, detail)
    positions, total = empty_lines(lines, report.max_info - len(report.info))
    for i in positions:
        report.add(stats, base + i, "empty", "empty line")
    report.counts["empty"] += total - len(positions)
    stats.lines += len(lines)
    stats.bytes += len(chunk)


def _record_long_line(line: LongLine, bounds: TokenBounds | None, report: ScanReport, stats: FileStats,
                      max_line_bytes: int) -> None:
    stats.lines += 1
    for kind, detail in line.findings(bounds, report.max_tokens, report.context_length, max_line_bytes):
        report.add(stats, stats.lines, kind, detail)
    stats.bytes += line.nbytes + line.terminated
