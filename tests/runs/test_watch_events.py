"""What scripts read from runbook, on real toy-trainer runs: every `watch --json` line against the
documented schema (runbook/watch_events.py, docs/watch-events.md), `status`'s exit code for each state
of a run, and the watcher's own failure told apart from an escalation."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess

from engine.watch.faults import FAULTS, DrillRun
from runbook.exit_codes import ExitCode
from runbook.watch_events import SCHEMA, problems
from tests.conftest import REPO, RUNBOOK, stop_process, wait_for
from tests.runs.test_toy_trainer import make_toy_project
from tests.toy_trainer.adapter import ToyAdapter

ENV = {**os.environ, "PYTHONPATH": str(REPO)}   # the watcher imports tests.toy_trainer


def status(project) -> subprocess.CompletedProcess:
    return subprocess.run([RUNBOOK, "status", "-c", str(project.config)], capture_output=True, text=True, timeout=60, env=ENV)


def progress_logged(project) -> bool:
    return any("toy step" in log.read_text(errors="replace") for log in (project.run_dir / "logs").glob("trainer-*.log"))


def test_every_watch_json_line_of_a_preempted_toy_run_matches_the_schema(tmp_path):
    project = make_toy_project(tmp_path / "project", step_seconds=0.1)
    project.set(watch={"poll_interval_s": 0.05})   # each step observed, so steps 10, 20, ... are printed
    stdout, stderr = open(tmp_path / "out.jsonl", "wb"), open(tmp_path / "err.log", "wb")
    watcher = subprocess.Popen([RUNBOOK, "watch", str(project.config), "--json"], stdout=stdout, stderr=stderr,
                               cwd=project.root, env=ENV)
    try:
        FAULTS["preemption"].inject(DrillRun(project.out_dir, project.run_dir, watcher, ToyAdapter(), 60))
        assert watcher.wait(timeout=90) == 0, (tmp_path / "err.log").read_text()
    finally:
        stop_process(watcher)
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]   # every line is JSON
    for line in lines:
        assert problems(line) == [], (line, problems(line))
    by_event: dict[str, list[dict]] = {}
    for line in lines:
        by_event.setdefault(line["event"], []).append(line)
    assert {"observation", "transition", "launch", "incident_opened", "action", "incident_closed"} <= set(by_event)
    steps = [o["step"] for o in by_event["observation"]]
    assert steps == sorted(set(steps)) or len(by_event["launch"]) > 1   # a resumed run may print a step again
    assert all(o["step"] % 10 == 0 and isinstance(o["loss"], float) for o in by_event["observation"])
    [opened], [closed] = by_event["incident_opened"], by_event["incident_closed"]
    assert opened["playbook"] == closed["playbook"] == "preemption" and opened["incident"] == closed["incident"] == "incident-1"
    assert closed["outcome"] == "recovered" and closed["resumed_step"] >= 10
    assert [a["action"] for a in by_event["action"]][:1] == ["verify_checkpoints"]
    assert all(a["outcome"] == "ok" for a in by_event["action"])
    assert [launch["launch"] for launch in by_event["launch"]] == [1, 2] and by_event["launch"][1]["resume_from"]
    assert by_event["transition"][-1]["state"] == "completed"


def test_the_schema_is_documented_field_by_field():
    doc = (REPO / "docs" / "watch-events.md").read_text()
    for event, fields in SCHEMA.items():
        assert f"`{event}`" in doc, event
        assert all(f"`{name}`" in doc for name in fields), event


@contextlib.contextmanager
def held(pid: int):
    """The trainer stopped (SIGSTOP) for the block: it stays alive, however long a loaded machine takes to
    run the `runbook status` inside, without running to its end; continued (SIGCONT) after."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def test_status_exit_code_tells_running_stopped_unsupervised_and_completed_apart(tmp_path):
    project = make_toy_project(tmp_path / "project", step_seconds=0.1,   # 40 steps: 4 s
                               watch={"hang_floor_s": 300, "hang_timeout_s": 300})   # held is not hung
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        wait_for(lambda: progress_logged(project), 30, what="the first progress line")
        with held(project.trainer_pid()):
            running = status(project)
        assert running.returncode == ExitCode.RUNNING, running.stdout + running.stderr
        watcher.send_signal(signal.SIGTERM)
        assert watcher.wait(timeout=60) == ExitCode.INTERRUPTED
        assert status(project).returncode == ExitCode.INTERRUPTED   # stopped: `runbook watch` resumes it

        watcher = project.watch(env={"PYTHONPATH": str(REPO)})
        first_pid = project.trainer_pid()
        # The second launch journaled as running (its pid file and its launch entry come a moment before the
        # transition; a watcher killed in between leaves "stopped" as the last state journaled).
        wait_for(lambda: project.trainer_pid() != first_pid
                 and f'"reason": "launch 2 (pid {project.trainer_pid()})' in (project.run_dir / "journal.jsonl").read_text(),
                 30, what="the second launch running")
        with held(second := project.trainer_pid()):
            watcher.kill()   # the watcher dies; its trainer lives on unsupervised
            watcher.wait(timeout=30)
            unsupervised = status(project)
            assert unsupervised.returncode == ExitCode.WATCHER_FAILED, unsupervised.stdout + unsupervised.stderr
            assert "no watcher holds the run folder" in unsupervised.stdout

            watcher = project.watch(env={"PYTHONPATH": str(REPO)})   # re-attaches and finishes
            wait_for(lambda: f"re-attached to trainer pid {second}" in (project.run_dir / "journal.jsonl").read_text(),
                     60, what="the third watcher to re-attach")
        assert watcher.wait(timeout=90) == 0, project.watch_output()
    finally:
        stop_process(watcher)
    done = status(project)
    assert done.returncode == ExitCode.OK and "state     completed" in done.stdout


def test_an_escalated_run_exits_4_from_watch_and_from_status(tmp_path):
    project = make_toy_project(tmp_path / "project", step_seconds=0.0)
    project.set(trainer={"extra": {"steps": "forty"}})   # the toy crashes at start: no playbook knows it
    watch = subprocess.run([RUNBOOK, "watch", str(project.config)], capture_output=True, text=True, timeout=120, env=ENV)
    assert watch.returncode == ExitCode.ESCALATED, watch.stdout + watch.stderr
    assert status(project).returncode == ExitCode.ESCALATED


def test_the_watchers_own_failure_is_not_an_escalation(tmp_path):
    project = make_toy_project(tmp_path / "project", step_seconds=0.1)
    project.set(trainer={"kind": "python:tests.toy_trainer.adapter:FaultyToyAdapter"})
    try:
        watch = subprocess.run([RUNBOOK, "watch", str(project.config)], capture_output=True, text=True, timeout=120, env=ENV)
        assert watch.returncode == ExitCode.WATCHER_FAILED, watch.stdout + watch.stderr
        assert "error: the watcher failed: RuntimeError: a bug in the toy adapter" in watch.stderr
        project.set(trainer={"kind": "python:tests.toy_trainer.adapter:ToyAdapter"})   # status reads logs through it
        assert status(project).returncode == ExitCode.WATCHER_FAILED   # unfinished, and nobody watches it
    finally:
        try:
            os.kill(project.trainer_pid(), signal.SIGKILL)   # the trainer the failed watcher left running
        except (OSError, ValueError):
            pass
