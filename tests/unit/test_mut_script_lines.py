"""engine/trainers/script/lines.py: the lines runbook/sdk.py prints, read back as events, and the saves a
log announces, on real log bytes (CRLF, \\r-separated progress bars, bytes that are not UTF-8)."""

from __future__ import annotations

import math
import os
from pathlib import Path

from engine.observe.events import CheckpointSaving, Progress, Resumed, Validation
from engine.trainers.script import lines


def _resume_file(folder: str) -> Path:
    return Path(folder) / "state.pt"


def test_a_progress_line_is_the_optimizer_step_its_loss_and_time():
    event = lines.parse("runbook: step 7 loss 2.500000 took 120.5 ms\r\n", _resume_file)
    assert event == Progress(iter_num=7, step=7, loss=2.5, iter_time_ms=120.5, is_step=True)
    assert math.isnan(lines.parse("runbook: step 8 loss nan took 1 ms", _resume_file).loss)
    assert lines.parse("runbook: step 9 loss abc took 1 ms", _resume_file) is None


def test_a_validation_line_is_the_val_loss_of_its_step():
    assert lines.parse("runbook: step 8 val_loss 2.25\n", _resume_file) == Validation(iter_num=8, val_loss=2.25)
    assert lines.parse("runbook: step 8 val_loss n/a", _resume_file) is None


def test_a_saving_line_names_the_resume_file_of_the_folder_and_a_resumed_line_its_path():
    assert lines.parse("runbook: saving /o/step-000008", _resume_file) == CheckpointSaving(path="/o/step-000008/state.pt")
    assert lines.parse("runbook: resumed /o/step-000008/state.pt", _resume_file) == Resumed(path="/o/step-000008/state.pt")


def test_lines_that_are_not_the_sdks_are_no_event():
    assert lines.parse("step 7 loss 2.5 took 1 ms", _resume_file) is None
    assert lines.parse("runbook: hello", _resume_file) is None
    assert lines.parse("runbook: saving " + "x" * lines.MAX_LINE, _resume_file) is None   # never a regex over it


def _is_checkpoint(name: str) -> bool:
    return name == "final" or name.startswith("step-")


def test_announced_folders_are_the_direct_children_of_out_dir_the_log_names_by_either_path(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    log = b"".join([
        b"runbook: saving %s/step-000010\n" % str(link).encode(),        # out_dir as the config names it
        b"runbook: saving %s/step-000020\r\n" % str(real).encode(),      # its real path, a CRLF line
        b"runbook: saving %s/final\n" % os.path.join(str(link), "sub", "..").encode(),
        b"runbook: saving %s/other/step-000030\n" % str(link).encode(),  # not a direct child
        b"runbook: saving %s/notes\n" % str(link).encode(),              # not a checkpoint's name
        b"  runbook: saving %s/step-000040\n" % str(link).encode(),      # not at a line's start
        b"\xff\xfe bytes that are not UTF-8\n",
        b"10%%|#   |\rrunbook: saving %s/step-000050" % str(link).encode(),  # after a progress bar's \r, no newline
    ])
    assert lines.announced_folders(log, link, _is_checkpoint) == {"step-000010", "step-000020", "final", "step-000050"}
    assert lines.announced_folders(b"", link, _is_checkpoint) == set()
