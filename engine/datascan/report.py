"""What a data scan found: the kinds of finding, one finding, per-file counts and the report.

Pure data: nothing here reads a file or a tokenizer. The scan (engine/datascan/scan.py) and the seed's
per-line loop (engine/datascan/oracle.py) fill the same `ScanReport`, so tests can compare them.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("invalid_utf8", "control_char", "encode_error", "too_long", "over_context", "empty")  # report order
INFO_KINDS = frozenset({"empty"})


class DataScanError(Exception):
    """The data or tokenizer cannot be scanned at all (missing folder, no tokenizer.json)."""


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    kind: str
    detail: str

    @property
    def severity(self) -> str:
        return "info" if self.kind in INFO_KINDS else "error"


@dataclass
class FileStats:
    path: str
    lines: int = 0
    bytes: int = 0
    bad_lines: set[int] = field(default_factory=set)  # complete, unlike the capped findings list


class ScanReport:
    """Everything one scan found. Findings are capped (errors and info separately); counts are not."""

    def __init__(self, max_tokens: int, context_length: int | None, max_findings: int = 1000, max_info: int = 100):
        self.max_tokens, self.context_length = max_tokens, context_length
        self.max_findings, self.max_info = max_findings, max_info
        self.files: list[FileStats] = []
        self.findings: list[Finding] = []
        self.info: list[Finding] = []
        self.counts: Counter[str] = Counter()
        self.token_bound = "none"
        self.seconds = 0.0

    def add(self, stats: FileStats, line: int, kind: str, detail: str) -> None:
        self.counts[kind] += 1
        target, cap = (self.info, self.max_info) if kind in INFO_KINDS else (self.findings, self.max_findings)
        if kind not in INFO_KINDS:
            stats.bad_lines.add(line)
        if len(target) < cap:
            target.append(Finding(stats.path, line, kind, detail))

    def bad_lines_of(self, path: Path | str) -> set[int]:
        wanted = os.path.abspath(path)
        for stats in self.files:
            if os.path.abspath(stats.path) == wanted:
                return stats.bad_lines
        return set()

    @property
    def bad_line_total(self) -> int:
        return sum(len(s.bad_lines) for s in self.files)

    @property
    def clean(self) -> bool:
        return self.bad_line_total == 0

    @property
    def summary(self) -> str:
        lines, size = sum(s.lines for s in self.files), sum(s.bytes for s in self.files)
        amount = f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.1f} kB"
        head = f"data scan: {len(self.files)} file(s), {lines:,} lines, {amount}"
        empty = f"; {self.counts['empty']:,} empty line(s) (info)" if self.counts["empty"] else ""
        if self.clean:
            return f"{head}: clean{empty}"
        kinds = ", ".join(f"{k} {self.counts[k]:,}" for k in KINDS if k not in INFO_KINDS and self.counts[k])
        first = self.findings[0]
        return (f"{head}: {self.bad_line_total:,} bad line(s) ({kinds}); first {Path(first.file).name}:{first.line} "
                f"{first.kind}{empty}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": [{"path": s.path, "lines": s.lines, "bytes": s.bytes, "bad_lines": len(s.bad_lines)} for s in self.files],
            "lines": sum(s.lines for s in self.files),
            "bytes": sum(s.bytes for s in self.files),
            "bad_lines": self.bad_line_total,
            "clean": self.clean,
            "counts": {k: self.counts[k] for k in KINDS if self.counts[k]},
            "findings": [asdict(f) for f in self.findings],
            "findings_truncated": sum(v for k, v in self.counts.items() if k not in INFO_KINDS) > len(self.findings),
            "empty_lines": [asdict(f) for f in self.info],
            "limits": {"max_tokens": self.max_tokens, "context": self.context_length},
            "token_bound": self.token_bound,
            "seconds": round(self.seconds, 3),
            "summary": self.summary,
        }
