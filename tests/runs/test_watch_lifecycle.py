"""The watcher's own life: one watcher per run, clean stop on SIGTERM, restart after its own crash.

Toy-trainer runs (tests/conftest.py's `project`): the trainer is paced so that it is still training when
the test acts (waits are on checkpoints and journal entries, never on sleeps), and the toy resumes
bit-identically, so every recovered run must end with the undisturbed run's exact state."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import psutil

import pytest

from tests.conftest import REPO, RUNBOOK, stop_process, wait_for

ENV = {"PYTHONPATH": str(REPO)}   # the watcher (and any command reading the config) imports tests.toy_trainer


def pace(project, step_seconds: float) -> None:
    """The toy's pace (only its speed: the run's result does not depend on it)."""
    project.set(trainer={"extra": {"step_seconds": step_seconds, "notice_save": True}})


def journal(project) -> list[dict]:
    return [json.loads(line) for line in (project.run_dir / "journal.jsonl").read_text().splitlines()]


def reattached(project) -> bool:
    return any("re-attached to trainer pid" in e.get("reason", "") for e in journal(project))


def newest_saved(project) -> int:
    steps = [s for s in (project.layout.step_of(p.name) for p in project.out_dir.iterdir()) if s is not None]
    return max((s for s in steps if project.saved(s)), default=0)


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_second_watcher_refuses_sigterm_stops_cleanly_and_a_new_watcher_resumes(project, reference_run):
    pace(project, 0.25)   # 40 steps: 10 s; the second watcher and the stop happen in the 35 steps after checkpoint 5
    first = project.watch(env=ENV)
    try:
        wait_for(lambda: project.saved(5), 120, what="checkpoint 5")
        second = subprocess.run([RUNBOOK, "watch", str(project.config)], capture_output=True, text=True, timeout=60,
                                env={**os.environ, **ENV})
        assert second.returncode == 5, second.stderr
        assert "another runbook watcher" in second.stderr and str(first.pid) in second.stderr

        trainer_pid = project.trainer_pid()
        assert psutil.pid_exists(trainer_pid) and not project.saved(40), "the toy finished first: slow its pace"
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 7, project.watch_output()
        assert not psutil.pid_exists(trainer_pid) or psutil.Process(trainer_pid).status() == psutil.STATUS_ZOMBIE
    finally:
        stop_process(first)
    assert journal(project)[-1]["to"] == "stopped"
    assert not (project.out_dir / "final").exists()   # stopped mid-run, not trained on

    resumed = project.watch(env=ENV)
    try:
        assert resumed.wait(timeout=120) == 0, project.watch_output()
    finally:
        stop_process(resumed)
    launches = [e for e in journal(project) if e["kind"] == "launch"]
    assert len(launches) == 2 and launches[1]["resume_from"], launches
    resumed_from = launches[1]["resume_from"]
    assert resumed_from == str(project.layout.resume_file(project.step_dir(project.layout.step_in_path(resumed_from))))
    assert project.layout.step_in_path(resumed_from) >= 5
    assert project.incidents() == []  # a deliberate stop is not an incident
    project.assert_same_result_as(reference_run)   # counters and bit-identical weights


def test_a_finished_run_is_not_trained_again(reference_run):
    done = reference_run["project"]
    launches = [e for e in journal(done) if e["kind"] == "launch"]
    result = subprocess.run([RUNBOOK, "watch", str(done.config)], capture_output=True, text=True, timeout=60,
                            env={**os.environ, **ENV})
    assert result.returncode == 0, result.stderr
    assert "already completed" in result.stderr
    assert [e for e in journal(done) if e["kind"] == "launch"] == launches   # no trainer started


# One run, two watcher crashes: mid-run (the new watcher re-attaches, no second launch), then in the middle of
# a recovery (the next watcher finishes that same incident).
@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_a_killed_watcher_is_restarted_reattaches_and_finishes_an_interrupted_recovery(project, reference_run, tmp_path):
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "slow_preemption.yaml").write_text("""
name: slow-preemption
description: a preemption whose recovery takes long enough to crash the watcher in the middle of it
match: {exit: {signals: [SIGTERM], codes: [75]}}   # 75: the trainer saved on the notice and exited
actions:
  - record: {note: "step {{ state.metrics.step }}"}
  - wait: {seconds: 8}
  - resume: {from: newest_verified}
""")
    project.set(playbooks={"paths": [str(playbooks)], "shipped": False})
    pace(project, 0.3)   # 40 steps: 12 s; a watcher restart and a checkpoint fit in the 30 steps after checkpoint 10
    first = project.watch(env=ENV)
    wait_for(lambda: project.saved(10), 120, what="checkpoint 10")
    trainer_pid = project.trainer_pid()
    first.send_signal(signal.SIGKILL)  # the watcher crashes; the trainer (own session) keeps training
    first.wait(timeout=30)
    assert psutil.pid_exists(trainer_pid)

    second = project.watch(env=ENV)
    try:
        wait_for(lambda: reattached(project), 60, what="re-attach")
        assert [e["kind"] for e in journal(project)].count("launch") == 1   # re-attached, not launched again
        attached_at = newest_saved(project)
        # It trains on under the new watcher: a checkpoint after the re-attach, from the same trainer.
        wait_for(lambda: newest_saved(project) > attached_at, 60, what="a checkpoint after the re-attach")
        assert project.trainer_pid() == trainer_pid and not project.saved(40), "the toy finished first: slow its pace"
        os.kill(trainer_pid, signal.SIGTERM)
        wait_for(lambda: any(e["kind"] == "action_done" for e in journal(project)), 60, what="first action done")
        second.send_signal(signal.SIGKILL)  # the watcher dies in the middle of the `wait`
        second.wait(timeout=30)
    finally:
        stop_process(second)
    assert [e["kind"] for e in journal(project)].count("action_done") == 1, "the wait ended before the watcher died"

    third = project.watch(env=ENV)
    try:
        assert third.wait(timeout=120) == 0, project.watch_output()
    finally:
        stop_process(third)
    entries = journal(project)
    assert entries[-1]["to"] == "completed"
    incidents = project.incidents()
    assert len(incidents) == 1, [i["id"] for i in incidents]
    incident = incidents[0]
    assert incident["outcome"] == "recovered" and incident["trainer_exit_code"] == 75
    assert [a["verb"] for a in incident["actions"]] == ["record", "wait", "resume"]  # record not repeated
    assert any("restarted during this recovery" in n for n in incident["notes"])
    assert [e["kind"] for e in entries].count("launch") == 2   # the first trainer, then the one resume
    project.assert_same_result_as(reference_run)   # counters and bit-identical weights
