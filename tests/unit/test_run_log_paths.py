"""Issue 26 item 6: run_log, run_log_template and watch.quarantine_dir get out_dir's protections.

Each hostile value is refused when the run config loads (one sentence with file:line); the run-log
writer itself also refuses a FIFO or device, so a file swapped in later cannot block the watcher.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from engine.core.yaml_source import SourceError
from engine.records.run_log import append_entry, render_entry
from engine.trainers.run_config import load_config


def _project(tmp_path: Path, text: str, make=None) -> Path:
    path = tmp_path / "proj" / "configs" / "run_config.yaml"
    path.parent.mkdir(parents=True)
    if make:
        make(tmp_path / "proj")
    path.write_text(text)
    return path


def _fifo(proj: Path) -> None:
    os.mkfifo(proj / "fifo")


def _big(proj: Path) -> None:
    (proj / "big.j2").write_text("x" * 300_000)


REFUSED = [
    ("run_log: configs/run_config.yaml\n", None, "is the run config"),
    ("run_log: runs/pretrain/journal.jsonl\n", None, "is the run's journal"),
    ("run_log: checkpoints/pretrain/step-00000010/lit_model.pth\n", None, "inside out_dir"),
    ("run_log: data/stdlib/train/a.txt\n", None, "inside data.train_dir"),
    ("run_log: data/stdlib/val/v.txt\n", None, "inside data.val_dir"),
    ("run_log: /dev/zero\n", None, "not a regular file"),
    ("run_log: fifo\n", _fifo, "not a regular file"),
    ("run_log: configs\n", None, "a folder"),
    ("run_log_template: fifo\n", _fifo, "not a regular file"),
    ("run_log_template: /dev/zero\n", None, "not a regular file"),
    ("run_log_template: big.j2\n", _big, "more than"),
    ("run_log_template: missing.j2\n", None, "missing"),
    ("watch:\n  quarantine_dir: /\n", None, "system folder"),
    ("watch:\n  quarantine_dir: .\n", None, "project folder"),
    ("watch:\n  quarantine_dir: configs\n", None, "configs folder"),
    ("watch:\n  quarantine_dir: data/stdlib/train\n", None, "data.train_dir"),
    ("watch:\n  quarantine_dir: data\n", None, "data.train_dir"),
    ("watch:\n  quarantine_dir: checkpoints/pretrain/quarantine\n", None, "inside out_dir"),
    ("watch:\n  quarantine_dir: checkpoints\n", None, "holds out_dir"),
    # A name longer than the filesystem allows (found by tests/unit/test_fuzz_configs.py: it raised OSError).
    ("run_log: " + "x" * 300 + "\n", None, "unusable (File name too long)"),
    ("run_log_template: " + "x" * 300 + "\n", None, "unusable (File name too long)"),
    ("watch:\n  quarantine_dir: " + "x" * 300 + "\n", None, "unusable (File name too long)"),
    ("run_log: configs/run_config.yaml/log.md\n", None, "unusable (Not a directory)"),
]


@pytest.mark.parametrize("text,make,reason", REFUSED)
def test_hostile_run_log_and_quarantine_paths_are_refused_at_load(tmp_path, text, make, reason):
    path = _project(tmp_path, text, make)
    start = time.monotonic()
    with pytest.raises(SourceError) as err:
        load_config(path)
    assert time.monotonic() - start < 5
    message = str(err.value)
    assert f"{path}:" in message and reason in message and "\n" not in message.strip(), message


@pytest.mark.parametrize("text", ["run_log: docs/run-log.md\n", "watch:\n  quarantine_dir: runs/q\n", ""])
def test_ordinary_values_load(tmp_path, text):
    load_config(_project(tmp_path, text))


def test_the_writer_refuses_a_fifo_run_log_and_template_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "log")
    os.mkfifo(tmp_path / "tpl")
    start = time.monotonic()
    with pytest.raises(ValueError, match="not a regular file"):
        append_entry(tmp_path / "log", {"id": "incident-1"})
    with pytest.raises(ValueError):
        render_entry({"id": "incident-1"}, tmp_path / "tpl")
    with pytest.raises(ValueError):
        render_entry({"id": "incident-1"}, Path("/dev/zero"))
    assert time.monotonic() - start < 5
