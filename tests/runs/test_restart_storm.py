"""A restart storm across classes escalates (issue 48 item 5): incidents of two kinds or more, one after another,
with the run never past the step where the first failed, trip no playbook's own limit; the incident that would be
the watch.restart_storm_incidents-th (5) escalates instead, naming the chain.

The pure chain and verdict: tests/unit/test_mut_matcher_storm.py. Here, real: a toy trainer
that holds at step 3 of every launch (no checkpoint before it: each relaunch starts over), SIGKILLed and
SIGTERMed by turns from outside: killed, preemption, killed, preemption, and the fifth escalates."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.conftest import REPO, make_toy_project, stop_process


def newest_launch_reached(project, launch: int, step: int) -> bool:
    logs = sorted((project.run_dir / "logs").glob("trainer-*.log"), key=lambda p: p.stat().st_mtime)
    return len(logs) >= launch and f"toy step {step}/" in logs[-1].read_text(errors="replace")


@pytest.mark.slow
def test_a_run_killed_and_preempted_by_turns_at_the_same_step_escalates_at_the_fifth_incident(tmp_path):
    project = make_toy_project(tmp_path / "project", step_seconds=0.02, notice_save=False, save_interval=100)
    project.set(trainer={"env": {"RUNBOOK_TOY_HOLD_AT_STEP": "3"}}, watch={"hang_timeout_s": 600})
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        pids = []
        for launch, sig in enumerate([signal.SIGKILL, signal.SIGTERM] * 2 + [signal.SIGKILL], start=1):
            deadline = time.monotonic() + 60
            while not newest_launch_reached(project, launch, 3):
                assert watcher.poll() is None and time.monotonic() < deadline, project.watch_output()
                time.sleep(0.05)
            pid = int((project.run_dir / "trainer.pid").read_text())
            assert pid not in pids
            pids.append(pid)
            os.kill(pid, sig)
        assert watcher.wait(timeout=60) == 4, project.watch_output()   # escalated
    finally:
        stop_process(watcher)
    incidents = project.incidents()
    assert [(i["playbook"], i["outcome"]) for i in incidents] == [
        ("killed", "recovered"), ("preemption", "recovered"), ("killed", "recovered"), ("preemption", "recovered"),
        ("killed", "escalated")], [(i["playbook"], i["outcome"]) for i in incidents]
    last = incidents[-1]
    assert last["outcome"] == "escalated" and "restart storm: 5 incidents of 2 kinds" in str(last), last
    assert "restart storm" in (project.root / "docs" / "run-log.md").read_text()
