"""engine/checkpoints/partial_saves.py on real out_dirs and real trainer logs (a `kind: script` run): what the
trainer announced, read a block at a time, what an interrupted save left, and what runbook may delete."""

from __future__ import annotations

import gzip
import io
import os

import pytest

from engine.checkpoints import partial_saves
from engine.checkpoints.partial_saves import line_blocks, read_announced
from engine.trainers.script.adapter import ScriptAdapter
from tests.unit.ckpt_files import announce, save

LAYOUT = ScriptAdapter().layout
MiB = 2**20


def test_line_blocks_end_at_newlines_hold_about_a_mebibyte_and_lose_no_line():
    text = b"".join(b"line %07d of a trainer log, as long as most\n" % i for i in range(120_000))   # 5.5 MiB
    blocks = list(line_blocks(io.BytesIO(text + b"last, unended")))
    assert b"".join(blocks) == text + b"last, unended"
    assert all(b.endswith(b"\n") for b in blocks[:-1]) and blocks[-1].endswith(b"last, unended")
    assert len(blocks) >= 5 and max(map(len, blocks)) <= MiB + 64   # a mebibyte read, plus the line it cut


def test_line_blocks_leave_out_a_line_too_long_to_be_an_announcement_and_keep_the_next():
    long = b"runbook: saving /o/step-000001" + b"x" * (2 * MiB)      # 2 MiB + 30 bytes, no newline in it
    kept = b"a" * (MiB - 1) + b"\n"                                  # a mebibyte: always kept
    blocks = list(line_blocks(io.BytesIO(b"first\n" + long + b"\nrunbook: saving /o/step-000002\n" + kept)))
    assert b"".join(blocks) == b"first\nrunbook: saving /o/step-000002\n" + kept
    assert list(line_blocks(io.BytesIO(b"x" * (3 * MiB)))) == []   # a whole stream of one unended line
    assert list(line_blocks(io.BytesIO(b""))) == []


def test_announcements_are_read_from_every_launchs_log_gzipped_or_not(tmp_path):
    out, logs = tmp_path / "out", tmp_path / "run" / "logs"
    announce(tmp_path / "run", out / "step-000010", log="trainer-001.log")
    announce(tmp_path / "run", out / "step-000020", out / "final", log="trainer-002.log")
    (logs / "trainer-002.log.gz").write_bytes(gzip.compress((logs / "trainer-002.log").read_bytes()))
    (logs / "trainer-002.log").unlink()                                # rotated
    announce(tmp_path / "run", out / "step-000030", log="trainer-003.log.bak")   # not a trainer log
    (logs / "trainer-004.log.gz").write_bytes(b"not gzip at all")       # unreadable: skipped, not fatal
    (logs / "trainer-005.log.gz").write_bytes(gzip.compress(b"runbook: saving %s/step-000050\n" % str(out).encode())[:-12])
    (logs / "trainer-006.log").mkdir()                                  # not a file
    assert read_announced(logs, out, LAYOUT) == {"step-000010", "step-000020", "final"}


def test_a_growing_log_is_read_again_and_kept_once_in_the_cache(tmp_path):
    out, run = tmp_path / "out", tmp_path / "run"
    announce(run, out / "step-000010")
    log = run / "logs" / "trainer-001.log"
    assert read_announced(run / "logs", out, LAYOUT) == {"step-000010"}
    for step in (20, 30, 40):
        announce(run, out / f"step-{step:06d}")
        assert f"step-{step:06d}" in read_announced(run / "logs", out, LAYOUT)
    assert [k for k in partial_saves._cache if k[0] == str(log)] != [] and \
        len([k for k in partial_saves._cache if k[0] == str(log)]) == 1   # one entry per log, however often it grew
    assert read_announced(run / "logs", tmp_path / "elsewhere", LAYOUT) == set()   # another out_dir: its own answer


def test_clear_trainer_tmp_removes_the_trainers_temporaries_and_minds_no_folder(tmp_path):
    tmp = partial_saves.trainer_tmp_dir(tmp_path)
    assert tmp.parent == tmp_path and tmp.name.endswith("trainer") and tmp.name.startswith("tmp-runbook-")
    partial_saves.clear_trainer_tmp(tmp_path)                           # none yet: nothing to do
    (tmp / "sub").mkdir(parents=True)
    (tmp / "sub" / "x.part").write_bytes(b"half")
    partial_saves.clear_trainer_tmp(tmp_path)
    assert not tmp.exists()
