"""PURE. The lines runbook/sdk.py prints (also runbook/hf_callback.py's), read back as events.

The two sides must agree: tests/trainers/test_formats.py prints with the sdk and parses here."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from engine.observe.events import CheckpointSaving, Event, Progress, Resumed, Validation

PROGRESS = re.compile(r"^runbook: step (\d{1,12}) loss (\S{1,40}) took (\d{1,12}(?:\.\d*)?) ms"
                      r"(?: grad_norm (\S{1,40}))?(?: lr (\S{1,40}))?$")
VALIDATION = re.compile(r"^runbook: step (\d{1,12}) val_loss (\S{1,40})$")
SAVING = re.compile(r"^runbook: saving (.{1,4096})$")
SAVING_PREFIX = b"runbook: saving "   # every line SAVING matches holds these bytes
RESUMED = re.compile(r"^runbook: resumed (.{1,4096})$")
MAX_LINE = 8192   # a longer line is no sdk line: never run a regex over megabytes of one line


def _loss(text: str) -> float | None:
    try:
        return float(text)   # "nan" and "inf" included: the nan playbook reads them
    except ValueError:
        return None


def parse(line: str, resume_file_of: Callable[[str], Path]) -> Event | None:
    """`resume_file_of(folder) -> Path`: the announced folder's resume file (the event names the file)."""
    line = line.rstrip("\r\n")
    if len(line) > MAX_LINE or not line.startswith("runbook: "):
        return None
    if (m := PROGRESS.match(line)) and (loss := _loss(m.group(2))) is not None:
        step = int(m.group(1))
        return Progress(iter_num=step, step=step, loss=loss, iter_time_ms=float(m.group(3)), is_step=True,
                        grad_norm=_loss(m.group(4) or ""), lr=_loss(m.group(5) or ""))
    if (m := VALIDATION.match(line)) and (loss := _loss(m.group(2))) is not None:
        return Validation(iter_num=int(m.group(1)), val_loss=loss)   # the observer files it at the current step
    if (m := SAVING.match(line)):
        return CheckpointSaving(path=str(resume_file_of(m.group(1))))
    if (m := RESUMED.match(line)):
        return Resumed(path=m.group(1))
    return None


def announced_folders(log_text: bytes, out_dir: Path, is_checkpoint_name: Callable[[str], bool]) -> set[str]:
    """Names of out_dir's children whose save the log announces (`runbook: saving <out_dir>/<name>`)."""
    roots = {os.path.abspath(out_dir), os.path.realpath(out_dir)}
    names = set()
    for line in _saving_lines(log_text):
        if len(line) <= MAX_LINE and (m := SAVING.match(line)):
            root, name = os.path.split(os.path.normpath(m.group(1)))
            if root in roots and is_checkpoint_name(name):
                names.add(name)
    return names


def _saving_lines(log_text: bytes) -> Iterator[str]:
    """The lines of `log_text` (as str.splitlines gives them) that may announce a save, one at a time: the text
    is never decoded or split whole, so memory stays at one line however long the log. A newline ends any
    undecoded UTF-8 sequence, so each newline-ended piece decodes and splits as it does inside the whole."""
    for piece in io.BytesIO(log_text):   # newline-ended pieces (BytesIO shares the bytes, no copy)
        if SAVING_PREFIX in piece:
            yield from piece.decode("utf-8", "replace").splitlines()
