"""The nan playbook's data scan on a run whose trainer tokenizes by itself (kind script, hf-trainer): no
tokenizer.json, lengths in bytes, the bad lines still found (issue 44 item 5: "no tokenizer.json" on every
HF and script run)."""

from __future__ import annotations

import pytest

from engine.datascan.report import DataScanError
from engine.datascan.scan import scan_folder


def test_a_folder_without_a_tokenizer_is_scanned_in_bytes_for_a_trainer_that_tokenizes_by_itself(tmp_path):
    data = tmp_path / "train"
    data.mkdir()
    (data / "a.txt").write_bytes(b"plain text\n\xff\xfe binary junk\n" + b"x" * 300 + b"\nok\n")
    report = scan_folder(data, tmp_path / "no-tokenizer", max_tokens_per_line=200, bytes_without_tokenizer=True)
    kinds = {f["kind"] for f in report["findings"]}
    assert kinds == {"invalid_utf8", "too_long"}, report
    assert "lengths in bytes" in report["summary"]
    with pytest.raises(DataScanError, match="no tokenizer.json"):   # litgpt's run needs its tokenizer
        scan_folder(data, tmp_path / "no-tokenizer", max_tokens_per_line=200)
