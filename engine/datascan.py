"""Find bad lines in training text with the run's tokenizer (the seed's "bad data" locator), and clean them.

A line is the bytes between two b"\\n" (a trailing b"\\r" belongs to the terminator), numbered from 1,
exactly as iterating the file in binary mode yields them. Kinds of finding, in report order:

    invalid_utf8   bytes that are not UTF-8 (error)      control_char  C0 control or DEL other than \\t (error)
    encode_error   the tokenizer raised (error)          too_long      more tokens than the limit (error)
    over_context   more tokens than --context (error)    empty         an empty line; the seed skips them (info)

Speed: instead of the seed's `for line in f: tok.encode(line)` the scan works on 8 MB chunks with
C-level bytes operations (decode, translate, split, count) and tokenizes only the lines that *could*
be over a limit. For a byte-level BPE tokenizer with no normalizer every byte becomes one symbol
before merging and merges only shrink the sequence, so a line of n bytes has at most n tokens
(`token_bounds` checks the tokenizer spec; anything else is tokenized in full, in batches). A line so
long that even bytes / longest-token exceeds the limit is reported without tokenizing it.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from itertools import compress, count
from pathlib import Path
from typing import Any, Iterable, Iterator

from engine.durable import atomic_write

DEFAULT_MAX_TOKENS = 100_000
CHUNK_BYTES = 8 << 20
BATCH_LINES, BATCH_BYTES = 1024, 4 << 20
KINDS = ("invalid_utf8", "control_char", "encode_error", "too_long", "over_context", "empty")
INFO_KINDS = frozenset({"empty"})
CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)")  # the per-line reference's test
LONE_CR = re.compile(rb"\r(?!\n)")
# Deleting every byte that is not a C0 control or DEL leaves only the controls: a cheap "any?" test.
_NOT_CONTROL = bytes(b for b in range(256) if not (b < 32 or b == 127))
# Pre-tokenizers that only split the text (never add characters) when combined with ByteLevel.
_SPLITTERS = frozenset({"Split", "Digits", "Punctuation", "Whitespace", "WhitespaceSplit", "CharDelimiterSplit"})
_LOSSLESS = frozenset({"ByteLevel", "Split", "Digits", "Punctuation"})  # keep every byte (Split unless "Removed")


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

    def __init__(self, max_tokens: int, context: int | None, max_findings: int = 1000, max_info: int = 100):
        self.max_tokens, self.context = max_tokens, context
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
            "limits": {"max_tokens": self.max_tokens, "context": self.context},
            "token_bound": self.token_bound,
            "seconds": round(self.seconds, 3),
            "summary": self.summary,
        }


# --- tokenizer ------------------------------------------------------------------------------------

def load_tokenizer(tokenizer_dir: Path):
    from tokenizers import Tokenizer

    path = Path(tokenizer_dir) / "tokenizer.json"
    if not path.is_file():
        raise DataScanError(f"no tokenizer.json in {tokenizer_dir}")
    return Tokenizer.from_file(str(path))


def _counting_tokenizer(tokenizer):
    """Truncation would hide long lines and padding would inflate counts: count on a copy without them."""
    if getattr(tokenizer, "truncation", None) is None and getattr(tokenizer, "padding", None) is None:
        return tokenizer
    from tokenizers import Tokenizer

    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


@dataclass(frozen=True)
class TokenBounds:
    """bytes / longest <= tokens(line) <= bytes + slack for a line of `bytes` UTF-8 bytes."""

    slack: int
    longest: int | None  # bytes of the longest token; None when tokens may drop bytes (no lower bound)

    def lower(self, nbytes: int) -> int:
        return -(-nbytes // self.longest) if self.longest else 0


def token_bounds(tokenizer) -> TokenBounds | None:
    """Bounds on a line's token count from its byte length, or None when the spec doesn't show them.

    Upper: BPE over a ByteLevel pre-tokenizer with no normalizer. ByteLevel maps each byte to one
    symbol, the other allowed pre-tokenizers only split (or drop whitespace), BPE merges only shrink,
    and an added token replaces at least one byte; `add_prefix_space` adds one symbol. Special
    tokens are not added (the scan encodes with add_special_tokens=False). Lower: when nothing drops
    bytes or fuses unknowns, the tokens partition the bytes, so there are at least bytes / longest.
    """
    try:
        spec = json.loads(tokenizer.to_str())
    except Exception:  # not a HF tokenizers object (a test double, another library)
        return None
    model = spec.get("model") or {}
    if spec.get("normalizer") is not None or model.get("type") != "BPE" or not model.get("vocab"):
        return None
    pre = spec.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    types = [s.get("type") for s in steps]
    if "ByteLevel" not in types or any(t not in _SPLITTERS | {"ByteLevel"} for t in types):
        return None
    slack = sum(1 for s in steps if s.get("type") == "ByteLevel" and s.get("add_prefix_space"))
    lossless = not model.get("fuse_unk") and all(
        s.get("type") in _LOSSLESS and str(s.get("behavior", "")).lower() != "removed" for s in steps)
    longest = max([len(t) for t in model["vocab"]] + [len(t["content"].encode()) for t in spec.get("added_tokens", [])])
    return TokenBounds(slack, longest if lossless else None)


def _encode_batch(tokenizer, texts: list[str]) -> list[int | Exception]:
    """Token counts, or the exception for lines the tokenizer refuses (found by retrying one by one)."""
    fast = getattr(tokenizer, "encode_batch_fast", None) or tokenizer.encode_batch
    try:
        return [len(e.ids) for e in fast(texts, add_special_tokens=False)]
    except Exception:
        return [_encode_one(tokenizer, t) for t in texts]


def _encode_one(tokenizer, text: str) -> int | Exception:
    try:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)
    except Exception as exc:
        return exc


def _token_findings(n: int | Exception, max_tokens: int, context: int | None) -> tuple[str, str] | None:
    if isinstance(n, Exception):
        return "encode_error", f"{type(n).__name__}: {str(n)[:200]}"
    if n > max_tokens:
        return "too_long", f"{n:,} tokens > limit {max_tokens:,}"
    if context is not None and n > context:
        return "over_context", f"{n:,} tokens > context {context:,}"
    return None


# --- the fast scan ----------------------------------------------------------------------------------

def _chunks(fh) -> Iterator[bytes]:
    """Blocks of about CHUNK_BYTES that end at a newline (or EOF), so no line is split."""
    parts: list[bytes] = []
    while block := fh.read(CHUNK_BYTES):
        cut = block.rfind(b"\n") + 1
        if cut == 0:  # a very long line: keep collecting until it ends
            parts.append(block)
            continue
        yield b"".join(parts) + block[:cut]
        parts = [block[cut:]]
    if rest := b"".join(parts):
        yield rest


class _LineOf:
    """Line index of increasing byte offsets in a chunk, counting newlines incrementally (O(chunk))."""

    def __init__(self, chunk: bytes):
        self.chunk, self.pos, self.line = chunk, 0, 0

    def __call__(self, offset: int) -> tuple[int, int]:
        self.line += self.chunk.count(b"\n", self.pos, offset)
        self.pos = offset
        return self.line, offset - self.chunk.rfind(b"\n", 0, offset)  # (index, 1-based column)


def _invalid_utf8(chunk: bytes, lines: list[bytes]) -> list[tuple[int, str]]:
    found, pos, line_of, view = [], 0, _LineOf(chunk), memoryview(chunk)
    for _ in range(8):  # sparse errors: one C-level decode of the rest of the chunk after each
        try:
            codecs.utf_8_decode(view[pos:], "strict", True)
            return found
        except UnicodeDecodeError as err:
            index, column = line_of(pos + err.start)
            found.append((index, f"invalid UTF-8 byte 0x{chunk[pos + err.start]:02x} at column {column}"))
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
                found.append((index, f"invalid UTF-8 byte 0x{lines[index][err.start]:02x} at column {err.start + 1}"))
    return found


def _control_chars(chunk: bytes) -> list[tuple[int, str]]:
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
    found, line_of = [], _LineOf(chunk)
    for pos in sorted(hits):
        index, column = line_of(pos)
        if not found or found[-1][0] != index:  # one finding per line, at its first control char
            found.append((index, f"control character U+{chunk[pos]:04X} at column {column}"))
    return found


def _scan_chunk(chunk: bytes, tokenizer, bounds: TokenBounds | None, report: ScanReport, stats: FileStats) -> None:
    lines = chunk.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the chunk ended with a newline: no line after it
    base = stats.lines + 1
    found: list[tuple[int, str, str]] = []
    invalid = _invalid_utf8(chunk, lines)
    found += [(i, "invalid_utf8", d) for i, d in invalid]
    found += [(i, "control_char", d) for i, d in _control_chars(chunk)]

    limit = min(report.max_tokens, report.context or report.max_tokens)
    if bounds is None:  # no proven bound: every non-empty line must be tokenized
        candidates = [i for i, ln in enumerate(lines) if ln and ln != b"\r"]
    else:
        candidates = list(compress(count(), map((limit - bounds.slack).__lt__, map(len, lines))))
    skip = {i for i, _ in invalid}
    to_encode = []
    for i in candidates:
        if i in skip:
            continue
        nbytes = len(lines[i].removesuffix(b"\r"))
        if bounds and bounds.lower(nbytes) > report.max_tokens:  # certainly over: don't spend seconds on it
            found.append((i, "too_long", f"at least {bounds.lower(nbytes):,} tokens ({nbytes:,} bytes) > limit {report.max_tokens:,}"))
        else:
            to_encode.append(i)
    for batch in _batches(to_encode, lines):
        counts = _encode_batch(tokenizer, [lines[i].removesuffix(b"\r").decode() for i in batch])
        for i, n in zip(batch, counts):
            if hit := _token_findings(n, report.max_tokens, report.context):
                found.append((i, *hit))

    for i, kind, detail in sorted(found, key=lambda f: (f[0], KINDS.index(f[1]))):
        report.add(stats, base + i, kind, detail)
    _count_empty(lines, base, report, stats)
    stats.lines += len(lines)
    stats.bytes += len(chunk)


def _batches(indices: list[int], lines: list[bytes]) -> Iterator[list[int]]:
    batch, size = [], 0
    for i in indices:
        batch.append(i)
        size += len(lines[i])
        if len(batch) >= BATCH_LINES or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _count_empty(lines: list[bytes], base: int, report: ScanReport, stats: FileStats) -> None:
    total = lines.count(b"") + lines.count(b"\r")
    room = report.max_info - len(report.info)
    positions: list[int] = []
    for empty in (b"", b"\r"):  # line numbers only while the info list has room
        i = -1
        for _ in range(room):
            try:
                i = lines.index(empty, i + 1)
            except ValueError:
                break
            positions.append(i)
    for i in sorted(positions)[:room]:
        report.add(stats, base + i, "empty", "empty line")
    report.counts["empty"] += total - min(len(positions), room)


def scan_files(paths: Iterable[Path], tokenizer, max_tokens_per_line: int = DEFAULT_MAX_TOKENS,
               context: int | None = None, max_findings: int = 1000) -> ScanReport:
    """Scan text files with a `tokenizers.Tokenizer` (or anything with encode/encode_batch)."""
    started = time.perf_counter()
    report = ScanReport(max_tokens_per_line, context, max_findings)
    tokenizer = _counting_tokenizer(tokenizer)
    bounds = token_bounds(tokenizer)
    report.token_bound = "none" if bounds is None else f"bytes/{bounds.longest or 'inf'} <= tokens <= bytes + {bounds.slack}"
    for path in paths:
        stats = FileStats(str(path))
        report.files.append(stats)
        with open(path, "rb") as fh:
            for chunk in _chunks(fh):
                _scan_chunk(chunk, tokenizer, bounds, report, stats)
    report.seconds = time.perf_counter() - started
    return report


def text_files(folder: Path) -> list[Path]:
    """The files a trainer reads from a data folder (litgpt TextFiles: every *.txt, not recursive)."""
    return sorted(Path(folder).glob("*.txt"))


def scan_folder(train_dir: Path, tokenizer_dir: Path, max_tokens_per_line: int = DEFAULT_MAX_TOKENS,
                context: int | None = None) -> dict[str, Any]:
    """Scan every .txt in a data folder; JSON-serialisable report with a one-line `summary`."""
    train_dir = Path(train_dir)
    if not train_dir.is_dir():
        raise DataScanError(f"data folder {train_dir} does not exist")
    report = scan_files(text_files(train_dir), load_tokenizer(tokenizer_dir), max_tokens_per_line, context)
    return report.to_dict()


# --- the seed's loop, kept as the oracle for tests and the benchmark ---------------------------------

def scan_files_per_line(paths: Iterable[Path], tokenizer, max_tokens_per_line: int = DEFAULT_MAX_TOKENS,
                        context: int | None = None, max_findings: int = 1000) -> ScanReport:
    """One line at a time, every line through `tokenizer.encode`: slow and obviously right."""
    started = time.perf_counter()
    report = ScanReport(max_tokens_per_line, context, max_findings)
    tokenizer = _counting_tokenizer(tokenizer)
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
                    report.add(stats, number, "invalid_utf8", f"invalid UTF-8 byte 0x{line[err.start]:02x} at column {err.start + 1}")
                if match := CONTROL.search(raw):
                    report.add(stats, number, "control_char", f"control character U+{raw[match.start()]:04X} at column {match.start() + 1}")
                if not line:
                    report.add(stats, number, "empty", "empty line")  # the seed skips these
                elif text is not None and (hit := _token_findings(_encode_one(tokenizer, text), max_tokens_per_line, context)):
                    report.add(stats, number, *hit)
    report.seconds = time.perf_counter() - started
    return report


# --- cleaning -----------------------------------------------------------------------------------------

def clean_dir_for(folder: Path) -> Path:
    """A fresh sibling folder for the cleaned data: train -> train-clean (-2, -3... if taken)."""
    folder = Path(os.path.abspath(folder))  # not resolve(): stay beside the folder the config names
    base = re.sub(r"-clean(-\d+)?$", "", folder.name)
    for n in count(1):
        candidate = folder.with_name(f"{base}-clean" if n == 1 else f"{base}-clean-{n}")
        if not candidate.exists():
            return candidate
    raise AssertionError("unreachable")


def fix_file(path: Path, report: ScanReport, out_dir: Path | None = None) -> Path:
    """Write `path` minus its bad lines to out_dir/<same name> (default <folder>-clean/). Never overwrites."""
    path = Path(os.path.abspath(path))
    out_dir = Path(out_dir) if out_dir else path.parent.with_name(path.parent.name + "-clean")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / path.name
    if target.exists():
        raise FileExistsError(f"{target} exists; a cleaned copy never replaces a file")
    bad = report.bad_lines_of(path)

    def write_kept_lines(dst) -> None:
        with open(path, "rb") as src:
            for number, raw in enumerate(src, 1):  # binary iteration splits on b"\n": the scan's numbering
                if number not in bad:
                    dst.write(raw)

    atomic_write(target, write_kept_lines)
    return target


def fix_folder(folder: Path, report: ScanReport, extra_files: Iterable[Path] = ()) -> Path:
    """A complete cleaned copy of a data folder in a new sibling folder; the original is not touched.

    Files with bad lines are rewritten without them; the others are hard-linked (copied across
    filesystems): the trainer only reads them, and a data set may be large. The folder appears
    under its final name only once complete, so a crash never leaves a half-cleaned data folder.
    """
    folder = Path(os.path.abspath(folder))
    target = clean_dir_for(folder)
    staging = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    names = {p.name for p in text_files(folder)}
    names |= {Path(p).name for p in extra_files if Path(os.path.abspath(p)).parent == folder}
    for name in sorted(names):
        if report.bad_lines_of(folder / name):
            fix_file(folder / name, report, staging)
        else:
            try:
                os.link(folder / name, staging / name)  # follows a symlinked file to its data
            except OSError:
                shutil.copy2(folder / name, staging / name)
    os.rename(staging, target)
    return target
