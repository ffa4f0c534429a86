"""engine/checkpoints/out_dir_claim.py in one process, on real folders and real flocks (an flock is held per open
file, so a second claim here conflicts as a second watcher's would): the run's id, the owner marker, and why a
claim is refused."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from engine.checkpoints.out_dir_claim import (
    OutDirBlocked,
    OutDirClaim,
    OutDirTaken,
    live_holders,
    owner_problem,
    read_owner,
    read_run_id,
    run_id,
    taken_sentence,
)
from engine.checkpoints.store import OWNER_MARKER_NAME
from engine.core.run_folder import RunFolder


def _run(tmp_path: Path, name: str) -> RunFolder:
    (tmp_path / name).mkdir()
    return RunFolder(tmp_path / name)


def test_a_runs_id_is_made_once_as_run_and_16_hex_digits_and_read_back(tmp_path):
    folder = _run(tmp_path, "a")
    assert read_run_id(folder) is None
    made = run_id(folder)
    assert made.startswith("run-") and len(made) == 20 and int(made[4:], 16) >= 0
    assert run_id(folder) == made == read_run_id(folder)


@pytest.mark.parametrize("kept, read", [
    ("run-0123456789abcdef\n", "run-0123456789abcdef"),            # every character an id may hold
    ("run-" + "a" * 60 + "X", "run-" + "a" * 60),                # only the first 64 characters count
    ("run-xyz", None), ("abc-run", None), ("", None),
])
def test_only_a_run_id_of_its_characters_is_read_back(tmp_path, kept, read):
    folder = _run(tmp_path, "a")
    folder.run_id.write_text(kept)
    assert read_run_id(folder) == read


def test_an_owner_marker_is_read_within_4096_bytes_and_must_name_a_run_id(tmp_path):
    marker = tmp_path / OWNER_MARKER_NAME
    assert read_owner(tmp_path) is None
    record = {"run_id": "run-00", "pad": ""}
    record["pad"] = "x" * (4096 - len(json.dumps(record)))
    marker.write_text(json.dumps(record))
    assert marker.stat().st_size == 4096 and read_owner(tmp_path) == record
    record["pad"] += "x"
    marker.write_text(json.dumps(record))
    with pytest.raises(OutDirTaken, match="cannot be read"):
        read_owner(tmp_path)
    for bad in ([1, 2], {"run_dir": "/somewhere"}, {"run_id": 7}):
        marker.write_text(json.dumps(bad))
        with pytest.raises(OutDirTaken, match="names no run_id"):
            read_owner(tmp_path)


def test_a_marker_that_cannot_be_read_is_refused_with_the_reason(tmp_path):
    (tmp_path / OWNER_MARKER_NAME).mkdir()
    with pytest.raises(OutDirTaken) as taken:
        read_owner(tmp_path)
    assert f"its owner marker {tmp_path / OWNER_MARKER_NAME} cannot be read (" in str(taken.value)
    assert "is a folder, not a file); runbook will not use" in str(taken.value)
    (tmp_path / OWNER_MARKER_NAME).rmdir()
    (tmp_path / OWNER_MARKER_NAME).write_text("{not json")
    problem = owner_problem(tmp_path, _run(tmp_path, "a"))
    assert problem.startswith(f"out_dir {tmp_path}: its owner marker") and "cannot be read (" in problem
    assert "JSON" in problem.split("cannot be read (", 1)[1]


def test_the_refusal_names_the_owner_shortened_and_whether_it_is_live(tmp_path):
    owner = {"run_id": "run-1", "run_dir": "d" * 600, "config": "c" * 600}
    said = taken_sentence(tmp_path, owner, {30, 4})
    assert f"run_dir {'d' * 500}, config {'c' * 500};" in said
    assert "its watcher is running now (pid 4, 30)" in said and str(tmp_path / OWNER_MARKER_NAME) in said
    assert "no watcher of it is running now" in taken_sentence(tmp_path, owner, set())
    assert "no watcher of it is running now" in taken_sentence(tmp_path, owner, None)


def test_a_claim_writes_the_marker_and_another_run_is_refused_live_or_not(tmp_path):
    out, config = tmp_path / "deep" / "out", tmp_path / "run.yaml"
    a, b = _run(tmp_path, "a"), _run(tmp_path, "b")
    assert live_holders(out) is None                          # no out_dir yet: cannot tell
    with OutDirClaim(out, a, config):                         # a nested out_dir that does not exist yet
        marker = json.loads((out / OWNER_MARKER_NAME).read_text())
        assert marker["schema"] == 1 and marker["run_id"] == read_run_id(a)
        assert marker["run_dir"] == str(a.root.resolve()) and marker["config"] == str(config.resolve())
        assert live_holders(out) == {os.getpid()}
        assert owner_problem(out, a) is None
        assert "its watcher is running now" in owner_problem(out, b)
        with pytest.raises(OutDirTaken) as live:
            OutDirClaim(out, b, config).acquire()
        assert "belongs to another run" in str(live.value) and f"(pid {os.getpid()})" in str(live.value)
        with pytest.raises(OutDirTaken) as same:
            OutDirClaim(out, a, config).acquire()
        assert str(same.value) == f"out_dir {out} is claimed by another watcher of this same run (pid {os.getpid()}); stop it first"
    assert live_holders(out) == set()
    with OutDirClaim(out, a, config):                         # its own out_dir, again: the marker stays
        pass
    with pytest.raises(OutDirTaken) as finished:
        OutDirClaim(out, b, config).acquire()
    assert "belongs to another run" in str(finished.value) and "no watcher of it is running now" in str(finished.value)
    assert owner_problem(out, a) is None and "no watcher of it is running now" in owner_problem(out, b)


def test_a_claim_racing_a_watcher_that_has_not_written_its_marker_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)       # another watcher, between its flock and its marker
        with pytest.raises(OutDirTaken, match=r"unknown \(no marker yet\)"):
            OutDirClaim(out, _run(tmp_path, "a"), tmp_path / "c.yaml").acquire()
        (out / OWNER_MARKER_NAME).write_text("[")
        with pytest.raises(OutDirTaken, match=r"unknown \(its marker cannot be read\)"):
            OutDirClaim(out, _run(tmp_path, "b"), tmp_path / "c.yaml").acquire()
    finally:
        os.close(fd)
    assert (out / OWNER_MARKER_NAME).read_text() == "["   # the refused claims wrote nothing


def test_a_folder_named_last_blocks_the_claim_and_nothing_is_written(tmp_path):
    out = tmp_path / "out"
    (out / "last").mkdir(parents=True)
    with pytest.raises(OutDirBlocked, match="not runbook's `last` link"):
        OutDirClaim(out, _run(tmp_path, "a"), tmp_path / "c.yaml").acquire()
    assert os.listdir(out) == ["last"]
