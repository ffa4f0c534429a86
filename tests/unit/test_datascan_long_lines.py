"""Lines too long to hold: the scan streams them and says the same as it does of a line held whole,
and cleaning drops them, in bounded memory both (a multi-gigabyte "line" must not take the machine)."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest
from tokenizers import Tokenizer, pre_tokenizers

from engine.datascan.scan import CHUNK_BYTES, fix_file, fix_folder, scan_files
from tests.unit.test_datascan import planted_corpus, python_lines, tokenizer, tokenizer_dir  # noqa: F401  (fixtures)

CAP = 1 << 20  # max_line_bytes for the streamed scans: every long line below is over it


def long_lines_file(path: Path) -> dict[int, list[tuple[str, str]]]:
    """Lines of 9-17 MB, each spanning a whole CHUNK_BYTES read, with their features placed on the
    read boundaries; returns {line: [(kind, detail fragment)]} for what a scan must find."""
    data, expected = bytearray(), {}

    def normal(n: int) -> None:
        data.extend(b"\n".join(python_lines(n)) + b"\n")

    def boundary() -> int:  # the first read boundary at least a block past the line's start
        return (len(data) // CHUNK_BYTES + 1) * CHUNK_BYTES

    def long_line(number: int, edits: dict[int, bytes], end: bytes, findings: list[tuple[str, str]]) -> None:
        start, body = len(data), bytearray(b"w" * (boundary() + CHUNK_BYTES + 4096 - len(data)))
        for offset, raw in edits.items():
            body[offset - start:offset - start + len(raw)] = raw
        data.extend(body + end)
        expected[number] = findings

    normal(20)                                                            # lines 1-20
    b = boundary()
    long_line(21, {len(data) + 99: b"\x07", b - 1: b"\xc3\xa9", b + 5000: b"\xe9"}, b"\n",  # é across a read
              [("invalid_utf8", f"byte 0xe9 at column {b + 5000 - len(data) + 1}"), ("control_char", "U+0007 at column 100")])
    normal(5)                                                             # lines 22-26
    b, start = boundary() + CHUNK_BYTES, len(data)
    long_line(27, {b - 1: b"\r"}, b"\r\n",                                # a lone CR ending a read; a CRLF end
              [("control_char", f"U+000D at column {b - start}"), ("too_long", "at least")])
    normal(5)                                                             # lines 28-32
    long_line(33, {}, b"\xe2\x82\n", [("invalid_utf8", "byte 0xe2 at column")])  # cut short at its end
    normal(5)                                                             # lines 34-38
    data.extend(b"h" * (2 * CAP) + b"\n")                                 # 39: over CAP, held in one read
    expected[39] = [("too_long", "at least")]
    long_line(40, {}, b"\r", [("control_char", "U+000D"), ("too_long", "at least")])  # unterminated, final CR
    path.write_bytes(data)
    return expected


@pytest.fixture(scope="module")
def long_file(tmp_path_factory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("long") / "blob.txt"
    return path, long_lines_file(path)


def peak_mb(work) -> tuple[object, float]:
    tracemalloc.start()
    try:
        result = work()
        return result, tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def test_a_streamed_long_line_gets_the_findings_of_a_held_one(long_file, tokenizer):
    path, expected = long_file
    streamed, peak = peak_mb(lambda: scan_files([path], tokenizer, 1000, max_line_bytes=CAP))
    held = scan_files([path], tokenizer, 1000, max_line_bytes=1 << 30)   # every line whole in memory

    assert streamed.findings == held.findings and streamed.counts == held.counts
    assert [(s.lines, s.bytes) for s in streamed.files] == [(40, path.stat().st_size)] == [(s.lines, s.bytes) for s in held.files]
    assert sorted({f.line for f in streamed.findings}) == sorted(expected)
    for number, wanted in expected.items():
        got = [(f.kind, f.detail) for f in streamed.findings if f.line == number]
        assert [kind for kind, _ in got] == [kind for kind, _ in wanted], (number, got)
        for (_, detail), (_, fragment) in zip(got, wanted):
            assert fragment in detail, (number, detail, fragment)
    # Streaming holds a few reads at a time (~42 MB); holding these 17 MB lines whole takes ~100 MB.
    assert peak < 7 * CHUNK_BYTES / 1e6, f"scan peak {peak:.0f} MB"


def test_without_a_lower_bound_a_line_over_the_cap_is_reported_by_its_length(long_file, tokenizer):
    path, expected = long_file
    dropping = Tokenizer.from_str(tokenizer.to_str())  # drops whitespace: no lower bound on tokens
    dropping.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    report = scan_files([path], dropping, 1000, max_line_bytes=CAP)
    too_long = [f for f in report.findings if f.kind == "too_long"]
    assert [f.line for f in too_long] == [27, 39, 40]
    assert too_long[1].detail == f"{2 * CAP:,} bytes, more than the {CAP:,} a line may have (not tokenized)"
    assert all(f.detail.endswith(f"more than the {CAP:,} a line may have (not tokenized)") for f in too_long)


def test_fix_file_drops_long_lines_without_holding_them(long_file, tokenizer, tmp_path):
    path, expected = long_file
    report = scan_files([path], tokenizer, 1000, max_line_bytes=CAP)
    target, peak = peak_mb(lambda: fix_file(path, report, tmp_path / "clean"))
    kept = [line for number, line in enumerate(path.read_bytes().split(b"\n"), 1) if number not in expected]
    assert target.read_bytes() == b"\n".join(kept) + b"\n"  # line 40, the unterminated one, is dropped
    assert peak < 16, f"fix_file peak {peak:.0f} MB: it held a line"


def test_fix_folder_that_fails_leaves_no_staging_folder(tmp_path, tokenizer):
    train = tmp_path / "train"
    train.mkdir()
    planted_corpus(train / "bad.txt")
    (train / "good.txt").write_bytes(b"x = 1\n")
    report = scan_files(sorted(train.iterdir()), tokenizer, 1000)
    (train / "good.txt").unlink()  # gone between the scan and the fix
    with pytest.raises(FileNotFoundError):
        fix_folder(train, report, extra_files=[train / "good.txt"])
    assert sorted(os.listdir(tmp_path)) == ["train"]
