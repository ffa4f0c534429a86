"""What litgpt 0.5.13 `pretrain` prints, as events; and which saves its log announces.

PROGRESS matched every progress line of a real run; the order a save announces and writes its files
is in partial_saves.py. litgpt's own `Tok/sec` summary is not read: it divides by a timestamp.
"""

from __future__ import annotations

import ast
import math
import os
import re
from collections.abc import Callable
from pathlib import Path

from engine.observe.events import CheckpointSaving, Event, FinalValidation, Progress, Resumed, Validation, ValidationStarted

# At most 15 digits: a longer step or iter is a garbled line, and would overflow float arithmetic later.
PROGRESS = re.compile(
    r"^Epoch (\d+) \| iter (\d{1,15}) step (\d{1,15}) \| loss train: (\S+), val: (\S+) \| "
    r"iter time: (\d{1,15}(?:\.\d*)?) ms( \(step\))? remaining time: (.+)$"
)
VALIDATION = re.compile(r"^iter (\d{1,15}): val loss (\S+), val time: ")
SAVING = re.compile(r"^Saving checkpoint to '(.+)'$")
RESUMING = re.compile(r"^Resuming training from (.+)$")
FINAL = re.compile(r"^Final evaluation \| val loss: (\S+) \|")
ANNOUNCEMENT = b"Saving checkpoint to "
VALIDATING = "Validating ..."   # litgpt's validate() prints it before its first batch (not in the silent sanity check)


def _float(text: str) -> float:
    try:
        return float(text.rstrip(","))
    except ValueError:
        return math.nan


def parse_line(line: str) -> Event | None:
    line = line.rstrip("\n")
    if line.startswith("Epoch "):
        m = PROGRESS.match(line)
        if m:
            return Progress(
                iter_num=int(m.group(2)),
                step=int(m.group(3)),
                loss=_float(m.group(4)),
                iter_time_ms=float(m.group(6)),
                is_step=m.group(7) is not None,
            )
    elif line.startswith("iter "):
        m = VALIDATION.match(line)
        if m:
            return Validation(iter_num=int(m.group(1)), val_loss=_float(m.group(2)))
    elif line == VALIDATING:
        return ValidationStarted()
    elif line.startswith("Saving checkpoint"):
        m = SAVING.match(line)
        if m:
            return CheckpointSaving(path=m.group(1))
    elif line.startswith("Resuming training"):
        m = RESUMING.match(line)
        if m:
            return Resumed(path=m.group(1).strip())
    elif line.startswith("Final evaluation"):
        m = FINAL.match(line)
        if m:
            return FinalValidation(val_loss=_float(m.group(1)))
    return None


def announced_saves(text: bytes, out_dir: Path, resume_file_name: str,
                    is_checkpoint_folder: Callable[[str], bool]) -> set[str]:
    """PURE. Folder names of out_dir whose save the log text announces: litgpt prints
    ``Saving checkpoint to '<out_dir>/<folder>/lit_model.pth'`` (a repr) before writing any file."""
    roots = {os.path.normpath(os.path.abspath(out_dir)), os.path.normpath(os.path.realpath(out_dir))}
    names, start = set(), 0
    while (at := text.find(ANNOUNCEMENT, start)) >= 0:
        end = text.find(b"\n", at)
        end = len(text) if end < 0 else end
        start = end
        if at and text[at - 1:at] != b"\n":
            continue  # only at the start of a line, as litgpt prints it
        try:
            path = ast.literal_eval(text[at + len(ANNOUNCEMENT):end].decode("utf-8").strip())
        except (ValueError, SyntaxError, UnicodeDecodeError):
            continue
        if not isinstance(path, str):
            continue
        folder, file = os.path.split(os.path.normpath(path))
        root, name = os.path.split(folder)
        if file == resume_file_name and root in roots and is_checkpoint_folder(name):
            names.add(name)
    return names
