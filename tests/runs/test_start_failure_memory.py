"""A start-up failure that repeats is counted across a watcher's restart (the journal's `launch_ended`).

Every launch of the toy dies before its first step of one full-disk error (espnet/espnet#4461's words,
tests/field/corpus). Launch 1 is disk-full's to try (prune, resume); launch 2 dying the same way is a
human's (same-failure-again). The watcher that saw launch 1 is SIGKILLed once launch 2 has started; the
one started after it must still count launch 2 as the second in a row. It used to remember only in memory
and restarted the disk-full remedy again (launch 3)."""

from __future__ import annotations

import json
import signal

from tests.conftest import REPO, make_toy_project, stop_process, wait_for

ENOSPC = "OSError: [Errno 28] No space left on device"


def journal(project) -> list[dict]:
    path = project.run_dir / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def launches(project) -> list[dict]:
    return [e for e in journal(project) if e["kind"] == "launch"]


def resume_journaled_after_launch_2(project) -> bool:
    """Launch 2 is in the journal and so is the step that made it (its action_done follows it). Killed between
    the two, a restarted watcher would run that resume step again: a third launch this test is not about."""
    kinds = [(e["kind"], e.get("launch")) for e in journal(project)]
    return ("launch", 2) in kinds and ("action_done", None) in kinds[kinds.index(("launch", 2)):]


def test_a_restarted_watcher_still_counts_the_same_start_failure_in_a_row(tmp_path):
    project = make_toy_project(tmp_path / "project")
    project.set(trainer={"extra": {"start_error": {"line": ENOSPC, "after_seconds": 3.0}}})
    env = {"PYTHONPATH": str(REPO)}
    first = project.watch(env=env)
    try:
        wait_for(lambda: resume_journaled_after_launch_2(project), timeout=60, what="launch 2, after disk-full's resume")
        first.send_signal(signal.SIGKILL)   # launch 2 is still in its 3 s start: it fails under the next watcher
        first.wait(timeout=10)
    finally:
        stop_process(first)
    second = project.watch(env=env)
    try:
        code = second.wait(timeout=60)
    finally:
        stop_process(second)
    output = project.watch_output()
    found = [(i["playbook"], i["outcome"]) for i in project.incidents()]
    assert found == [("disk-full", "recovered"), ("same-failure-again", "escalated")], output
    assert code == 4, output
    assert len(launches(project)) == 2, output          # never a third launch into the same error
    snapshot = project.incidents()[1]["snapshot"]
    assert snapshot["trainer"]["failed_alike_before_progress"] == 2, snapshot["trainer"]
