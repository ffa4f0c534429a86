"""One bad line in a real journal hides nothing behind it: it is named (file:line), skipped, and the rest is read.

The journal is the one a real `runbook watch` wrote for a completed run (the session's reference run);
each test copies that project and puts one garbage line in the middle, between two incidents written
by the real writer, so the attempt counts on both sides of the bad line can be checked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.records.journal import Journal
from engine.records.journal_lines import encode
from tests.conftest import REPO, RUNBOOK

T = 1_790_000_000.0


def strict_json(text: str):
    def refuse(name):
        raise ValueError(f"{name} in JSON output")
    return json.loads(text, parse_constant=refuse)


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """A `runbook` command on the copied project: its trainer is the toy, which runbook imports from the repo."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([RUNBOOK, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def real_line(kind: str, **fields) -> bytes:
    return encode({"time": T, "kind": kind, **fields})


def incident_pair(number: int) -> bytes:
    return (real_line("incident_opened", incident=f"incident-{number}", playbook="preemption", decision="recover")
            + real_line("incident_closed", incident=f"incident-{number}", outcome="recovered"))


GARBAGE = {
    "json-list": b"[1,2,3]",
    "no-kind": b'{"time":1}',
    "not-utf8": b'{"kind": "transition", "time": 1, "to": "running", "reason": "\xff\xfe"}',
    "torn": real_line("transition", **{"from": "running", "to": "stopped", "reason": "x"})[:37],
    "wrong-checksum": real_line("transition", **{"from": "running", "to": "stopped", "reason": "x"})
    .replace(b'"stopped"', b'"escalated"').rstrip(b"\n"),
    "launch-without-pid": real_line("launch", launch=7, log="/tmp/x.log").rstrip(b"\n"),
    "unknown-state": real_line("transition", **{"from": "running", "to": "exploded", "reason": "x"}).rstrip(b"\n"),
    "nan": b'NaN',
    "nan-time": b'{"kind": "transition", "time": NaN, "to": "stopped"}',
    "huge-pid": real_line("launch", launch=7, pid=10**400, log="/tmp/x.log").rstrip(b"\n"),
}


@pytest.fixture
def completed_copy(reference_run, tmp_path):
    """A copy of the reference run's project (a real completed run), its journal as the watcher wrote it."""
    source = reference_run["project"]
    root = tmp_path / "project"
    shutil.copytree(source.root, root, symlinks=True)
    config = root / "configs" / "run_config.yaml"
    journal = root / "runs" / "pretrain" / "journal.jsonl"
    assert Journal(journal).replay().phase.value == "completed"
    return config, journal


def corrupt(journal: Path, garbage: bytes) -> int:
    """Incident 1, the garbage line, incident 2, in the middle of the journal; returns the garbage's line number."""
    lines = journal.read_bytes().splitlines(keepends=True)
    middle = len(lines) // 2
    head = b"".join(lines[:middle]) + incident_pair(1)
    journal.write_bytes(head + garbage + b"\n" + incident_pair(2) + b"".join(lines[middle:]))
    return head.count(b"\n") + 1


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_a_bad_line_in_the_middle_is_named_and_skipped(completed_copy, name):
    config, journal = completed_copy
    line = corrupt(journal, GARBAGE[name])

    result = run("status", str(config))
    assert result.returncode == 0, result.stderr
    assert "state     completed" in result.stdout
    assert "Traceback" not in result.stderr
    assert f"{journal}:{line}:" in result.stderr and result.stderr.count("warning:") == 1, result.stderr

    as_json = run("status", str(config), "--json")
    assert as_json.returncode == 0 and strict_json(as_json.stdout)["state"] == "completed"

    # Both incidents count towards the playbook's limit and the circuit breaker, not only the first.
    reader = Journal(journal)
    assert len(reader.replay().history.fired["preemption"]) == 2
    assert [p.line for p in reader.problems] == [line]

    watch = run("watch", str(config))
    assert watch.returncode == 0 and "nothing to do" in watch.stderr
    assert f"{journal}:{line}:" in watch.stderr and "Traceback" not in watch.stderr


def test_report_names_the_bad_line_and_still_draws_the_run(completed_copy, tmp_path):
    config, journal = completed_copy
    line = corrupt(journal, b"[1,2,3]")
    result = run("report", str(config), "--output", str(tmp_path))   # a folder: the report goes inside
    assert result.returncode == 0, result.stderr
    assert f"{journal}:{line}:" in result.stderr
    assert "| run phase | completed (final/ written) |" in (tmp_path / "report.md").read_text()


def test_an_old_journal_without_checksums_still_loads(completed_copy):
    config, journal = completed_copy
    old = [json.loads(line) for line in journal.read_text().splitlines()]
    for entry in old:
        entry.pop("crc32")
    journal.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in old))
    result = run("status", str(config))
    assert result.returncode == 0 and "state     completed" in result.stdout and "warning" not in result.stderr


def test_an_append_after_a_garbage_line_is_seen(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append("transition", **{"from": "starting", "to": "running", "reason": "launch 1"})
    with open(journal.path, "ab") as fh:
        fh.write(b"garbage\n")
    journal.append("transition", **{"from": "running", "to": "completed", "reason": "done"})
    assert journal.replay().phase.value == "completed"
    assert [p.line for p in journal.problems] == [2]


def test_a_torn_last_line_does_not_swallow_the_next_append(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append("transition", **{"from": "starting", "to": "running", "reason": "launch 1"})
    whole = real_line("launch", launch=2, pid=99, log="x")
    with open(journal.path, "ab") as fh:
        fh.write(whole[:20])   # a crash mid-append
    journal.append("transition", **{"from": "running", "to": "completed", "reason": "done"})
    assert journal.replay().phase.value == "completed"
    assert journal.path.read_bytes().count(b"\n") == 3
    assert [p.line for p in journal.problems] == [2]


def test_an_entry_glued_onto_a_torn_line_by_an_old_watcher_is_recovered(tmp_path):
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b'{"kind": "launch", "la' + real_line("transition", **{"from": "x", "to": "completed"}))
    journal = Journal(path)
    assert journal.replay().phase.value == "completed"
    assert "recovered" in journal.problems[0].reason


def test_unknown_kinds_and_fields_are_kept(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append("launch", launch=1, pid=42, log="x", launcher_pid=41, status_file="s.json")
    journal.append("something_new", detail={"a": [1, 2]})
    first, second = journal.entries()
    assert first["launcher_pid"] == 41 and first["status_file"] == "s.json" and second["detail"] == {"a": [1, 2]}
    assert journal.problems == [] and journal.replay().trainer_pid == 42


def test_an_unreadable_journal_is_one_sentence_and_exit_9(completed_copy):
    config, journal = completed_copy
    journal.unlink()
    journal.mkdir()   # we run as root: a folder is the unreadable file chmod cannot make
    for command in ("status", "report", "watch"):
        result = run(command, str(config))
        assert result.returncode == 9, (command, result.stderr)
        assert str(journal) in result.stderr and "Traceback" not in result.stderr


def test_a_launch_after_the_open_incidents_last_finished_action_is_remembered_until_the_next_one():
    """What a restarted watcher's resume step keeps (engine/language/actions/resume.py): only a launch inside the
    open incident with no action journaled done after it."""
    from engine.records.journal import rebuild

    def launch(n):
        return {"kind": "launch", "launch": n, "pid": 100 + n, "log": f"trainer-{n:03d}.log", "resume_from": None}

    opened = {"kind": "incident_opened", "incident": "incident-1", "playbook": "oom", "decision": "recover", "time": 1.0}
    done = {"kind": "action_done", "incident": "incident-1", "index": 0, "ok": True}
    closed = {"kind": "incident_closed", "incident": "incident-1", "outcome": "recovered"}
    assert rebuild([launch(1)]).launch_since_last_action is None                        # no incident open
    assert rebuild([launch(1), opened, done, launch(2)]).launch_since_last_action == 2   # cut off after launching
    assert rebuild([launch(1), opened, launch(2), done]).launch_since_last_action is None
    assert rebuild([launch(1), opened, launch(2), closed]).launch_since_last_action is None
    assert rebuild([launch(1), opened, launch(2), closed, launch(3)]).launch_since_last_action is None
