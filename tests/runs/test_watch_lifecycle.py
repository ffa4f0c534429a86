"""The watcher's own life: one watcher per run, clean stop on SIGTERM, restart after its own crash."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import psutil

from tests.conftest import RUNBOOK, stop_process, wait_for
import pytest


# Transitional: these tests still run the real litgpt trainer (tests/conftest.py's `project` is the toy's).
@pytest.fixture
def project(litgpt_project):
    return litgpt_project


@pytest.fixture
def reference_run(litgpt_reference_run):
    return litgpt_reference_run



def journal(project) -> list[dict]:
    return [json.loads(line) for line in (project.run_dir / "journal.jsonl").read_text().splitlines()]


def test_second_watcher_refuses_sigterm_stops_cleanly_and_a_new_watcher_resumes(project, reference_run):
    first = project.watch()
    try:
        wait_for(lambda: (project.step_dir(10) / "model_config.yaml").exists(), 240, what="checkpoint 10")
        second = subprocess.run([RUNBOOK, "watch", str(project.config)], capture_output=True, text=True, timeout=60)
        assert second.returncode == 5, second.stderr
        assert "another runbook watcher" in second.stderr and str(first.pid) in second.stderr

        trainer_pid = project.trainer_pid()
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 7, project.watch_output()
        assert not psutil.pid_exists(trainer_pid) or psutil.Process(trainer_pid).status() == psutil.STATUS_ZOMBIE
    finally:
        stop_process(first)
    assert journal(project)[-1]["to"] == "stopped"

    resumed = project.watch()
    assert resumed.wait(timeout=300) == 0, project.watch_output()
    launches = [e for e in journal(project) if e["kind"] == "launch"]
    assert len(launches) == 2 and launches[1]["resume_from"].endswith("lit_model.pth")
    assert project.incidents() == []  # a deliberate stop is not an incident
    project.assert_same_result_as(reference_run)   # counters and bit-identical weights


def test_a_finished_run_is_not_trained_again(project, reference_run):
    done = reference_run["project"]
    result = subprocess.run([RUNBOOK, "watch", str(done.config)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert "already completed" in result.stderr


# One run, two watcher crashes: mid-run (the new watcher re-attaches, no second launch), then in the middle of
# a recovery (the next watcher finishes that same incident).
def test_a_killed_watcher_is_restarted_reattaches_and_finishes_an_interrupted_recovery(project, reference_run, tmp_path):
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "slow_preemption.yaml").write_text("""
name: slow-preemption
description: a preemption whose recovery takes long enough to crash the watcher in the middle of it
match: {exit: {signals: [SIGTERM], codes: [75]}}   # 75: the trainer saved on the notice and exited
actions:
  - record: {note: "step {{ state.metrics.step }}"}
  - wait: {seconds: 20}
  - resume: {from: newest_verified}
""")
    project.set(playbooks={"paths": [str(playbooks)], "shipped": False})
    first = project.watch()
    wait_for(lambda: (project.step_dir(10) / "model_config.yaml").exists(), 240, what="checkpoint 10")
    trainer_pid = project.trainer_pid()
    first.send_signal(signal.SIGKILL)  # the watcher crashes; the trainer (own session) keeps training
    first.wait(timeout=30)
    assert psutil.pid_exists(trainer_pid)

    second = project.watch()
    wait_for(lambda: any("re-attached to trainer pid" in e.get("reason", "") for e in journal(project)), 60, what="re-attach")
    assert [e["kind"] for e in journal(project)].count("launch") == 1   # re-attached, not launched again

    wait_for(lambda: (project.step_dir(20) / "model_config.yaml").exists(), 240, what="checkpoint 20")
    os.kill(project.trainer_pid(), signal.SIGTERM)
    wait_for(lambda: any(e["kind"] == "action_done" for e in journal(project)), 60, what="first action done")
    second.send_signal(signal.SIGKILL)  # the watcher dies in the middle of the `wait`
    second.wait(timeout=30)

    third = project.watch()
    assert third.wait(timeout=300) == 0, project.watch_output()
    entries = journal(project)
    assert entries[-1]["to"] == "completed"
    incidents = project.incidents()
    assert len(incidents) == 1, [i["id"] for i in incidents]
    incident = incidents[0]
    assert incident["outcome"] == "recovered"
    assert [a["verb"] for a in incident["actions"]] == ["record", "wait", "resume"]  # record not repeated
    assert any("restarted during this recovery" in n for n in incident["notes"])
    project.assert_same_result_as(reference_run)   # counters and bit-identical weights
