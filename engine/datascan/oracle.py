"""The seed's per-line loop, kept as the oracle the fast scan is tested and benchmarked against.

Slow and obviously right: one line at a time, every line through `tokenizer.encode`. It holds each
line in memory whole, so it is for tests and the benchmark, not for data of unknown shape.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable

from engine.datascan.lines import CONTROL, control_detail, utf8_detail
from engine.datascan.report import FileStats, ScanReport
from engine.datascan.tokens import DEFAULT_MAX_TOKENS, LineTokenizer, counting_tokenizer, encode_one, token_finding


def scan_files_per_line(paths: Iterable[Path], tokenizer: LineTokenizer, max_tokens_per_line: int = DEFAULT_MAX_TOKENS,
                        context_length: int | None = None, max_findings: int = 1000) -> ScanReport:
    """One line at a time, every line through `tokenizer.encode`: slow and obviously right."""
    started = time.perf_counter()
    report = ScanReport(max_tokens_per_line, context_length, max_findings)
    tokenizer = counting_tokenizer(tokenizer)
    for path in paths:
        stats = FileStats(str(path))
        report.files.append(stats)
        with open(path, "rb") as fh:
            for number, raw in enumerate(fh, 1):
                stats.lines, stats.bytes = number, stats.bytes + len(raw)
                line = raw.removesuffix(b"\n").removesuffix(b"\r")
                text = None
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError as err:
                    report.add(stats, number, "invalid_utf8", utf8_detail(line[err.start], err.start + 1))
                if match := CONTROL.search(raw):
                    report.add(stats, number, "control_char", control_detail(raw[match.start()], match.start() + 1))
                if not line:
                    report.add(stats, number, "empty", "empty line")  # the seed skips these
                elif text is not None and (hit := token_finding(encode_one(tokenizer, text), max_tokens_per_line, context_length)):
                    report.add(stats, number, *hit)
    report.seconds = time.perf_counter() - started
    return report
