"""The data scan against real files and a real BPE tokenizer, and `runbook scan-data --fix` end to end."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from tokenizers import Tokenizer, normalizers, pre_tokenizers

from engine.datascan.scan import (
    DataScanError,
    TokenBounds,
    clean_dir_for,
    fix_file,
    fix_folder,
    load_tokenizer,
    scan_files,
    scan_files_per_line,
    scan_folder,
    token_bounds,
)
from engine.core.config import compute_data_hash
from runbook.default_data import make_tokenizer


REPO = Path(__file__).resolve().parents[2]
RUNBOOK = str(Path(sys.executable).parent / "runbook")
STDLIB = Path(sysconfig.get_paths()["stdlib"])


def python_lines(count: int) -> list[bytes]:
    """Normal, non-empty lines of Python source (no control characters)."""
    lines: list[bytes] = []
    for path in sorted(STDLIB.glob("*.py")):
        for line in path.read_bytes().splitlines():
            if line.strip() and 0 < len(line) < 120 and b"\t" not in line and b"\x0c" not in line:
                lines.append(line)
                if len(lines) == count:
                    return lines
    raise AssertionError("not enough stdlib lines")


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tokenizer")
    (root / "corpus" / "train").mkdir(parents=True)
    (root / "corpus" / "train" / "code.txt").write_bytes(b"\n".join(python_lines(4000)))
    make_tokenizer(root / "corpus", root / "tok")
    return root / "tok"


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir) -> Tokenizer:
    return load_tokenizer(tokenizer_dir)


def planted_corpus(path: Path) -> dict[tuple[int, str], str]:
    """200 lines of Python with bad lines at known numbers; returns {(line, kind): detail fragment}."""
    lines = python_lines(200)
    lines[4] = b"name = 'caf\xe9'  # latin-1, not UTF-8"         # line 5
    lines[11] = b"x = [" + b"1000000, " * 2000 + b"]"               # line 12: enormous
    lines[19] = lines[20] = b""                                      # lines 20, 21: empty
    lines[29] = b"print('bell\x07')"                                 # line 30: control character
    lines[39] = b"crlf_is_fine = True\r"                             # line 40: CRLF ending, not a finding
    path.write_bytes(b"\n".join(lines) + b"\n")
    return {(5, "invalid_utf8"): "byte 0xe9 at column 12", (12, "too_long"): "tokens > limit 1,000",
            (30, "control_char"): "U+0007 at column 12"}


def test_scan_finds_exactly_the_planted_lines(tmp_path, tokenizer):
    expected = planted_corpus(tmp_path / "code.txt")
    report = scan_files([tmp_path / "code.txt"], tokenizer, max_tokens_per_line=1000)

    assert {(f.line, f.kind) for f in report.findings} == set(expected)
    for finding in report.findings:
        assert expected[finding.line, finding.kind] in finding.detail
    assert [(f.line, f.kind) for f in report.info] == [(20, "empty"), (21, "empty")]
    assert dict(report.counts) == {"invalid_utf8": 1, "too_long": 1, "control_char": 1, "empty": 2}
    assert report.files[0].bad_lines == {5, 12, 30} and report.files[0].lines == 200
    assert report.summary.startswith("data scan: 1 file(s), 200 lines") and "3 bad line(s)" in report.summary


def test_context_limit_flags_lines_over_the_model_context(tmp_path, tokenizer):
    lines = python_lines(50)
    lines[9] = b"total = " + b" + ".join(b"value_%d" % i for i in range(40))
    (tmp_path / "a.txt").write_bytes(b"\n".join(lines))
    report = scan_files([tmp_path / "a.txt"], tokenizer, max_tokens_per_line=100_000, context_length=64)
    assert [(f.line, f.kind) for f in report.findings] == [(10, "over_context")]


def generated_file(path: Path, seed: int, lines: int = 10_000) -> None:
    rng = random.Random(seed)
    normal = python_lines(3000)
    bad = [b"\xff\xfe broken", b"tab\tis fine", b"nul\x00byte", b"lone\rcarriage", b"", b"\r", b"\xe2\x82",
           b"del\x7f", b"k = '" + b"\xc3\xa9" * 900 + b"'", b"w" * 3000, b"ok\r", b"mixed \x1b[0m \xc0"]
    out = [rng.choice(bad) if rng.random() < 0.02 else rng.choice(normal) for _ in range(lines)]
    path.write_bytes(b"\n".join(out) + (b"\n" if seed % 2 else b""))


@pytest.mark.parametrize("context", [None, 48])
def test_fast_scan_agrees_with_the_per_line_loop(tmp_path, tokenizer, context):
    files = [tmp_path / "one.txt", tmp_path / "two.txt"]
    for seed, path in enumerate(files):
        generated_file(path, seed)
    fast = scan_files(files, tokenizer, max_tokens_per_line=1500, context_length=context)
    slow = scan_files_per_line(files, tokenizer, max_tokens_per_line=1500, context_length=context)
    assert fast.findings == slow.findings and fast.info == slow.info
    assert fast.counts == slow.counts and fast.counts["too_long"] > 0 and fast.counts["invalid_utf8"] > 0
    assert [(s.lines, s.bytes, s.bad_lines) for s in fast.files] == [(s.lines, s.bytes, s.bad_lines) for s in slow.files]


def test_a_byte_level_bpe_has_between_bytes_over_longest_and_bytes_tokens(tokenizer):
    bounds = token_bounds(tokenizer)
    assert bounds is not None and bounds.slack == 0 and 2 <= bounds.longest <= 40
    rng = random.Random(1)
    samples = ["", " ", "<s></s><unk>", "é" * 50, "日本語のテキスト", "🙂" * 20, "\x00\x01\x7f"]
    samples += ["".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randrange(1, 200))) for _ in range(300)]
    samples += python_lines(500)
    for text in samples:
        text = text.decode() if isinstance(text, bytes) else text
        assert bounds.lower(len(text.encode())) <= len(tokenizer.encode(text, add_special_tokens=False).ids) <= len(text.encode())


class TokenizerSpy:
    """The real tokenizer, noting the longest text it was asked to encode (every other call passes through)."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.longest_text = 0

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def encode(self, text, *args, **kwargs):
        self.longest_text = max(self.longest_text, len(text))
        return self._tokenizer.encode(text, *args, **kwargs)

    def encode_batch(self, texts, *args, **kwargs):
        self.longest_text = max([self.longest_text, *map(len, texts)])
        return self._tokenizer.encode_batch(texts, *args, **kwargs)

    encode_batch_fast = encode_batch


def test_a_line_certainly_over_the_limit_is_not_tokenized(tmp_path, tokenizer):
    (tmp_path / "blob.txt").write_bytes(b"x = 1\n" + b"z" * 20_000_000)  # a 20 MB line: a minified blob
    spy = TokenizerSpy(tokenizer)
    report = scan_files([tmp_path / "blob.txt"], spy, max_tokens_per_line=100_000)
    # Tokenizing it would take about half a minute: the byte count alone proves it too long.
    assert spy.longest_text < 1_000_000, spy.longest_text
    assert [(f.line, f.kind) for f in report.findings] == [(2, "too_long")]
    assert report.findings[0].detail.startswith("at least ")


def test_no_lower_bound_when_the_pre_tokenizer_drops_bytes(tmp_path, tokenizer):
    dropping = Tokenizer.from_str(tokenizer.to_str())
    dropping.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    assert token_bounds(dropping) == TokenBounds(slack=0, longest=None)
    (tmp_path / "a.txt").write_bytes(b" " * 300_000 + b"x\n")  # 300 kB but one token: not over 100,000
    assert scan_files([tmp_path / "a.txt"], dropping).clean


def test_a_tokenizer_without_the_bound_is_tokenized_in_full(tmp_path, tokenizer):
    expanding = Tokenizer.from_str(tokenizer.to_str())
    expanding.normalizer = normalizers.NFKD()  # NFKD can turn one byte-short char into many tokens
    assert token_bounds(expanding) is None
    (tmp_path / "a.txt").write_text("x = 1\n" + "\ufdfa" * 30 + "\n")  # 90 bytes, over 90 tokens after NFKD
    report = scan_files([tmp_path / "a.txt"], expanding, max_tokens_per_line=90)
    assert [(f.line, f.kind) for f in report.findings] == [(2, "too_long")]


def test_truncation_in_the_tokenizer_does_not_hide_long_lines(tmp_path, tokenizer):
    truncating = Tokenizer.from_str(tokenizer.to_str())
    truncating.enable_truncation(max_length=16)
    (tmp_path / "a.txt").write_bytes(b"y" * 500 + b"\n")
    report = scan_files([tmp_path / "a.txt"], truncating, max_tokens_per_line=100)
    assert [(f.line, f.kind) for f in report.findings] == [(1, "too_long")]
    assert truncating.truncation is not None  # the caller's tokenizer is left as it was


class RefusingTokenizer:
    """A tokenizer that raises on some input, as real ones do on text they cannot handle."""

    def encode(self, text, add_special_tokens=True):
        if "BOOM" in text:
            raise ValueError("cannot encode BOOM")
        return type("Encoding", (), {"ids": list(text)})()

    def encode_batch(self, texts, add_special_tokens=True):
        return [self.encode(t) for t in texts]


def test_lines_whose_encoding_raises_are_reported(tmp_path):
    (tmp_path / "a.txt").write_text("fine\nBOOM here\nfine again\n")
    report = scan_files([tmp_path / "a.txt"], RefusingTokenizer())
    assert [(f.line, f.kind, f.detail) for f in report.findings] == [(2, "encode_error", "ValueError: cannot encode BOOM")]
    assert scan_files_per_line([tmp_path / "a.txt"], RefusingTokenizer()).findings == report.findings


def test_scan_folder_returns_the_json_report_the_runtime_records(tmp_path, tokenizer_dir):
    (tmp_path / "train").mkdir()
    planted_corpus(tmp_path / "train" / "code.txt")
    (tmp_path / "train" / "notes.md").write_text("\xff not read: the trainer reads only *.txt")
    report = json.loads(json.dumps(scan_folder(tmp_path / "train", tokenizer_dir, 1000)))
    assert report["bad_lines"] == 3 and report["counts"]["empty"] == 2 and not report["clean"]
    assert [f["line"] for f in report["findings"]] == [5, 12, 30] and "3 bad line(s)" in report["summary"]
    with pytest.raises(DataScanError, match="no tokenizer.json"):
        scan_folder(tmp_path / "train", tmp_path, 1000)


def test_fix_folder_never_reuses_a_folder(tmp_path, tokenizer):
    (tmp_path / "train").mkdir()
    planted_corpus(tmp_path / "train" / "code.txt")
    report = scan_files([tmp_path / "train" / "code.txt"], tokenizer, 1000)
    first, second = fix_folder(tmp_path / "train", report), fix_folder(tmp_path / "train", report)
    assert (first.name, second.name) == ("train-clean", "train-clean-2")
    assert clean_dir_for(second).name == "train-clean-3"


def scanned_planted_file(tmp_path: Path, tokenizer):
    source = tmp_path / "train" / "code.txt"
    source.parent.mkdir()
    planted_corpus(source)
    return source, scan_files([source], tokenizer, 1000)


def test_fix_file_drops_exactly_the_bad_lines_through_one_atomic_write(tmp_path, tokenizer):
    source, report = scanned_planted_file(tmp_path, tokenizer)
    target = fix_file(source, report, tmp_path / "clean")
    kept = [line for number, line in enumerate(source.read_bytes().split(b"\n")[:-1], 1)
            if number not in report.bad_lines_of(source)]
    assert target.read_bytes() == b"".join(line + b"\n" for line in kept)
    assert os.listdir(tmp_path / "clean") == ["code.txt"]   # no temp file left beside it
    with pytest.raises(FileExistsError):
        fix_file(source, report, tmp_path / "clean")          # a cleaned copy never replaces a file


def test_fix_file_that_fails_midway_leaves_neither_target_nor_temp(tmp_path, tokenizer):
    source, report = scanned_planted_file(tmp_path, tokenizer)
    source.unlink()   # the read fails inside the write
    with pytest.raises(FileNotFoundError):
        fix_file(source, report, tmp_path / "clean")
    assert os.listdir(tmp_path / "clean") == []


# --- the command ------------------------------------------------------------------------------------

def make_project(root: Path, tokenizer_dir: Path, linked_data: bool = False) -> Path:
    """A scratch project laid out like the repo; `linked_data`: data/stdlib is a symlink, as in conftest."""
    (root / "configs").mkdir(parents=True)
    shutil.copy(REPO / "configs" / "run_config.yaml", root / "configs" / "run_config.yaml")
    stdlib = root / "data" / "stdlib"
    if linked_data:
        (root.parent / "shared-stdlib").mkdir()
        stdlib.parent.mkdir()
        stdlib.symlink_to(root.parent / "shared-stdlib")
    train, val = stdlib / "train", stdlib / "val"
    train.mkdir(parents=True)
    val.mkdir()
    planted_corpus(train / "shard-000.txt")
    (train / "shard-001.txt").write_bytes(b"\n".join(python_lines(300)[100:]) + b"\n")
    (val / "shard-000.txt").write_bytes(b"\n".join(python_lines(60)) + b"\n")
    shutil.copytree(tokenizer_dir, root / "data" / "tokenizer")
    return root


@pytest.fixture
def project(tmp_path, tokenizer_dir) -> Path:
    return make_project(tmp_path / "project", tokenizer_dir)


def runbook(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([RUNBOOK, "scan-data", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def scan_data_in_process(*args: str, cwd: Path):
    """The real command through typer's CliRunner: cheaper than a process where only output matters."""
    from typer.testing import CliRunner

    from runbook.cli import app

    here = Path.cwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(app, ["scan-data", *args])
    finally:
        os.chdir(here)


def test_scan_data_exits_10_with_a_table_of_bad_lines(project):
    result = scan_data_in_process("--max-tokens", "1000", cwd=project)
    assert result.exit_code == 10, result.output
    for fragment in ("shard-000.txt:5", "invalid_utf8", "shard-000.txt:12", "too_long", "shard-000.txt:30", "3 bad line(s)"):
        assert fragment in result.stdout
    clean = scan_data_in_process("data/stdlib/val", "--json", cwd=project)
    assert clean.exit_code == 0 and json.loads(clean.stdout)["scan"]["clean"]


@pytest.mark.parametrize("linked_data", [False, True], ids=["plain", "symlinked-data"])
def test_scan_data_fix_writes_clean_data_and_repoints_the_config(tmp_path, tokenizer_dir, linked_data):
    project = make_project(tmp_path / "project", tokenizer_dir, linked_data)
    config = project / "configs" / "run_config.yaml"
    train = project / "data" / "stdlib" / "train"
    original = {p.name: p.read_bytes() for p in train.iterdir()}
    before = config.read_text()

    result = runbook("--config", str(config), "--max-tokens", "1000", "--fix", cwd=project.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "untouched" in result.stdout and "data_hash ->" in result.stdout

    assert {p.name: p.read_bytes() for p in train.iterdir()} == original  # the original, byte for byte
    cleaned = project / "data" / "stdlib" / "train-clean"
    kept = [ln for n, ln in enumerate(original["shard-000.txt"].splitlines(keepends=True), 1) if n not in (5, 12, 30)]
    assert (cleaned / "shard-000.txt").read_bytes() == b"".join(kept)
    assert (cleaned / "shard-001.txt").read_bytes() == original["shard-001.txt"]

    after = config.read_text()
    assert re.search(r"^  train_dir: data/stdlib/train-clean +# folder of .txt files$", after, re.M)
    new_hash = compute_data_hash(cleaned, project / "data" / "stdlib" / "val")
    # the value, however the write-back quotes it (it edits only the scalar's characters)
    assert re.search(rf"^data_hash: (['\"]?){re.escape(new_hash)}\1(\s|$)", after, re.M), after
    # every comment of the original file is still there
    assert [ln.split("#", 1)[1] for ln in before.splitlines() if "#" in ln] == \
           [ln.split("#", 1)[1] for ln in after.splitlines() if "#" in ln]

    rescan = runbook("--max-tokens", "1000", "--json", cwd=project)
    assert rescan.returncode == 0 and json.loads(rescan.stdout)["scan"]["files"][0]["path"].startswith(str(cleaned))


def test_scan_data_refuses_missing_data_or_tokenizer_with_exit_3(project):
    missing = scan_data_in_process("data/nowhere", cwd=project)
    assert missing.exit_code == 3 and "does not exist" in missing.stderr
    shutil.rmtree(project / "data" / "tokenizer")
    no_tok = scan_data_in_process(cwd=project)
    assert no_tok.exit_code == 3 and "no tokenizer.json" in no_tok.stderr
    no_config = scan_data_in_process(cwd=project / "data")
    assert no_config.exit_code == 3 and "not found" in no_config.stderr
