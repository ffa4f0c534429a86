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


def test_a_folder_named_last_or_like_the_owner_marker_is_someone_elses(tmp_path):
    out = tmp_path / "out"
    (out / "last").mkdir(parents=True)                                  # a user's folder, not runbook's link
    (out / "runbook-owner.json").mkdir()                                # a folder, not the marker
    cleanup = partial_saves.find_partial_saves(out, frozenset(), LAYOUT)
    assert cleanup.foreign == ["last", "runbook-owner.json"] and cleanup.temps == cleanup.partial == []
    (out / "last").rmdir()
    (out / "runbook-owner.json").rmdir()
    (out / "last").symlink_to("step-000010")
    (out / "runbook-owner.json").write_text("{}")
    assert partial_saves.find_partial_saves(out, frozenset(), LAYOUT).foreign == []


def test_survey_does_not_follow_a_symlink_to_a_folder(tmp_path):
    out = tmp_path / "out"
    real = save(tmp_path / "elsewhere", 10)
    out.mkdir()
    (out / "step-000010").symlink_to(real)
    [entry] = partial_saves.survey(out, LAYOUT)
    assert (entry.name, entry.is_dir, entry.is_symlink, entry.children, entry.looks_whole) == ("step-000010", False, True, (), False)
    [entry] = partial_saves.survey(real.parent, LAYOUT)
    assert (entry.is_dir, entry.is_symlink, entry.children, entry.looks_whole) == (True, False, ("state.pt",), True)


def _temps(out):
    prefix = partial_saves.ckpts.own_tmp_prefix(out)
    return prefix, out / f"{prefix}prune-x", out / f"{prefix}last-1", out / f"{prefix}a.part"


def test_remove_temps_deletes_runbooks_temporaries_and_counts_their_own_bytes(tmp_path):
    out = tmp_path / "out"
    prefix, folder, link, part = _temps(out)
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a").write_bytes(b"x" * 100)
    outside = tmp_path / "big"
    outside.write_bytes(b"y" * 1000)
    (folder / "to-outside").symlink_to(outside)                         # not ours: not counted, not followed
    link.symlink_to("step-000010")                                      # a dangling `last` temp
    part.write_bytes(b"z" * 10)
    dir_link = out / f"{prefix}dirlink"
    dir_link.symlink_to(tmp_path)                                       # a link to a folder: removed, not emptied
    nested = out / "step-000010" / f"{prefix}m.part"
    nested.parent.mkdir()
    nested.write_bytes(b"w" * 5)
    names = [folder.name, link.name, part.name, dir_link.name, f"step-000010/{nested.name}", f"{prefix}gone"]
    assert partial_saves.remove_temps(out, names) == 115
    assert sorted(os.listdir(out)) == ["step-000010"] and os.listdir(out / "step-000010") == []
    assert outside.read_bytes() == b"y" * 1000 and (tmp_path / "big").exists()


@pytest.mark.parametrize("name", ["notes.txt", "step-000010/sub/{prefix}deep.part", "../{prefix}x.part"])
def test_remove_temps_refuses_what_runbook_did_not_name_and_deletes_nothing(tmp_path, name):
    out = tmp_path / "out"
    prefix, folder, _link, part = _temps(out)
    (out / "step-000010" / "sub").mkdir(parents=True)
    part.write_bytes(b"z")
    target = out / name.format(prefix=prefix)
    target.write_bytes(b"keep") if target.parent.exists() else None
    with pytest.raises(ValueError, match="refusing to delete"):
        partial_saves.remove_temps(out, [part.name, name.format(prefix=prefix)])
    assert part.exists() and (not target.parent.exists() or target.read_bytes() == b"keep")


def test_only_announced_checkpoints_without_anybody_elses_files_are_owned(tmp_path):
    out = tmp_path / "out"
    mine, users, unannounced = save(out, 10), save(out, 20), save(out, 30)
    (users / "notes.txt").write_text("mine, says the user")
    owned = partial_saves.owned_checkpoints(out, {mine.name, users.name}, LAYOUT)
    assert [c.path.name for c in owned] == ["step-000010"]
    assert unannounced.is_dir()


def test_a_line_of_a_mebibyte_cut_by_a_block_end_is_kept_and_one_over_it_ends_at_its_newline():
    mebibyte = b"a" * MiB + b"\nrunbook: saving /o/step-000001\n"     # the first block ends just before the newline
    assert b"".join(line_blocks(io.BytesIO(mebibyte))) == mebibyte
    over = b"x" * (2 * MiB) + b"\nrunbook: saving /o/step-000002\n"    # left out; its newline opens the third block
    assert b"".join(line_blocks(io.BytesIO(over))) == b"runbook: saving /o/step-000002\n"
