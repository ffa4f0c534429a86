"""A trainer's exit is known whoever started it: a re-attached trainer's failure is recovered by the
same playbook as a watched one (its launcher parent records the exit in the run folder).

Each test: the watcher is SIGKILLed while the trainer is held still (SIGSTOP), a new watcher
re-attaches, and only then does the trainer fail, from outside (SIGTERM, SIGKILL) or by itself
(a memory limit under a huge micro-batch, a diverging lr). The trainer is the toy (tests/conftest.py's
`project`), paced so that it is still training when the test acts; it resumes bit-identically, so a
recovered run ends with the undisturbed run's exact state.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import psutil
import pytest

from engine.observe.events import Progress
from engine.process.trainer_process import TrainerProcess, read_exit_status
from tests.conftest import HELD_TRAINERS, REPO, stop_process, wait_for
from tests.runs.test_dynamics_faults import without_loss_spike
from tests.toy_trainer.adapter import ToyAdapter

ENV = {"PYTHONPATH": str(REPO)}   # the watcher imports tests.toy_trainer


def pace(project, step_seconds: float, **extra) -> None:
    """The toy's pace (only its speed: the run's result does not depend on it), and its other options."""
    project.set(trainer={"extra": {"step_seconds": step_seconds, "notice_save": True, **extra}})



def journal(project) -> list[dict]:
    path = project.run_dir / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def trainer_logs(project) -> list[Path]:
    return sorted((project.run_dir / "logs").glob("trainer-*.log")) if (project.run_dir / "logs").exists() else []


def count_progress(log: Path) -> int:
    """The progress lines in a trainer log, as the toy's adapter reads them."""
    adapter = ToyAdapter()
    return sum(isinstance(adapter.parse_line(line), Progress) for line in log.read_text(errors="replace").splitlines())


def progress_lines(project) -> int:
    return sum(count_progress(log) for log in trainer_logs(project))


def restart_watcher_around_a_held_trainer(project, after_progress_lines: int) -> tuple:
    """Start a watcher, hold the trainer once it has printed that many progress lines, SIGKILL the
    watcher and start a new one; return (new watcher, trainer pid) once it has re-attached."""
    first = project.watch(env=ENV)
    try:
        wait_for(lambda: (project.run_dir / "trainer.pid").exists() and progress_lines(project) >= after_progress_lines,
                 120, what=f"{after_progress_lines} progress lines")
        trainer_pid = project.trainer_pid()
        HELD_TRAINERS.append(psutil.Process(trainer_pid))
        os.kill(trainer_pid, signal.SIGSTOP)
        held = psutil.Process(trainer_pid)   # NoSuchProcess: it ended before it was held (slow its pace)
        wait_for(lambda: held.status() == psutil.STATUS_STOPPED, 10, interval=0.02, what="the trainer held")
        first.send_signal(signal.SIGKILL)   # the watcher dies; the trainer and its launcher live on
        first.wait(timeout=30)
    finally:
        stop_process(first)
    assert not (project.out_dir / "final").exists(), "the toy finished first: slow its pace"
    second = project.watch(env=ENV)
    wait_for(lambda: any("re-attached to trainer pid" in e.get("reason", "") for e in journal(project)), 60,
             what="re-attach")
    return second, trainer_pid


def finish(watcher, project, timeout=120) -> int:
    try:
        return watcher.wait(timeout=timeout)
    finally:
        stop_process(watcher)


def assert_recovered_by(project, playbook: str) -> dict:
    incidents = project.incidents()
    assert incidents, "no incident"
    first = incidents[0]
    assert first["playbook"] == playbook, [i["playbook"] for i in incidents]
    assert first["outcome"] == "recovered", first
    assert not any(i["playbook"] in ("unknown-crash", "unknown-exit") for i in incidents), [i["playbook"] for i in incidents]
    assert "no playbook matched" not in project.watch_output()
    return first


def newest_log_progress_lines(project) -> int:
    logs = trainer_logs(project)
    return count_progress(logs[-1]) if logs else 0


def replace_watcher_around_the_held_trainer(project, watcher) -> tuple:
    """Hold the running trainer, SIGKILL its watcher and start a new one; return it and the trainer pid
    once it has re-attached."""
    attached = sum("re-attached to trainer pid" in e.get("reason", "") for e in journal(project))
    trainer_pid = project.trainer_pid()
    HELD_TRAINERS.append(psutil.Process(trainer_pid))
    os.kill(trainer_pid, signal.SIGSTOP)
    watcher.send_signal(signal.SIGKILL)
    watcher.wait(timeout=30)
    assert not (project.out_dir / "final").exists(), "the toy finished first: slow its pace"
    second = project.watch(env=ENV)
    wait_for(lambda: sum("re-attached to trainer pid" in e.get("reason", "") for e in journal(project)) > attached, 60,
             what="re-attach")
    return second, trainer_pid


# A SIGTERM is a notice to the toy, as to litgpt under runbook: it saves the step it is in and exits 75.
# One run, two re-attaches: each signal is recovered by its own playbook, and the run ends at the undisturbed state.
@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_a_signal_to_a_reattached_trainer_is_recovered_by_its_own_playbook(project, reference_run):
    pace(project, 0.2)   # 40 steps: 8 s; each hold comes well before the end (step 12, then 8 steps after a resume)
    expected = [(signal.SIGKILL, "killed", -9), (signal.SIGTERM, "preemption", 75)]
    watcher, trainer_pid = restart_watcher_around_a_held_trainer(project, after_progress_lines=12)
    pids = []
    try:
        for n, (sig, _playbook, _code) in enumerate(expected):
            if n:   # the relaunched trainer, once it has trained past the first incident's checkpoint
                wait_for(lambda: sum(e["kind"] == "launch" for e in journal(project)) == 2
                         and newest_log_progress_lines(project) >= 8, 120, what="the relaunched trainer's progress")
                watcher, trainer_pid = replace_watcher_around_the_held_trainer(project, watcher)
            os.kill(trainer_pid, sig)
            if sig != signal.SIGKILL:   # a SIGKILLed process is gone at once, stopped or not
                os.kill(trainer_pid, signal.SIGCONT)
            pids.append(trainer_pid)
            wait_for(lambda: len(project.incidents()) > n, 120, what=f"incident {n + 1}")
        assert finish(watcher, project) == 0, project.watch_output()
    finally:
        stop_process(watcher)
    incidents = project.incidents()
    assert [(i["playbook"], i["outcome"], i["trainer_exit_code"]) for i in incidents] == \
        [(playbook, "recovered", code) for _sig, playbook, code in expected], project.watch_output()
    assert "no playbook matched" not in project.watch_output()
    exited = [e for e in journal(project) if e["kind"] == "trainer_exited"]
    assert [(e["pid"], e["exit_code"]) for e in exited[:2]] == [(pid, code) for pid, (_s, _p, code) in zip(pids, expected)]
    project.assert_same_result_as(reference_run)   # counters and bit-identical weights


class StartGate:
    """A named pipe given to the toy as trainer.extra.env_file: each launch opens it for writing before
    anything else (before its micro-batch check), so it waits there, alive, until the gate is opened
    (a reader on the pipe). Then every launch passes."""

    def __init__(self, path: Path):
        self.path, self.opened, self.launches = path, threading.Event(), []
        os.mkfifo(path)
        self._reader = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        while self.opened.is_set():
            with open(self.path) as fh:   # waits for the next launch to open it; EOF when that launch closes it
                self.launches.extend(fh.read().splitlines())

    def open(self) -> None:
        if not self.opened.is_set():
            self.opened.set()
            self._reader.start()

    def close(self) -> None:
        """Let everything through, then stop the reader (a writer that opens and closes wakes it at once)."""
        self.open()
        self.opened.clear()
        try:
            os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:   # ENXIO: the reader is between two opens; it sees the cleared flag
            pass
        self._reader.join(timeout=10)


def test_an_oom_of_a_reattached_trainer_halves_the_micro_batch(project, reference_run, tmp_path):
    # A micro-batch of 8 does not fit the toy's "memory" (more than 4 fails at start, as an OOM does); the
    # gate holds the first trainer before that check until a new watcher has re-attached to it.
    gate = StartGate(tmp_path / "start-gate")
    project.set(micro_batch_size=8, batch_size=16)
    pace(project, 0.03, oom_above_micro_batch=4, env_file=str(gate.path))
    try:
        watcher, trainer_pid = restart_watcher_around_a_held_trainer(project, after_progress_lines=0)
        assert progress_lines(project) == 0 and gate.launches == []   # held at its start: it has not failed yet
        os.kill(trainer_pid, signal.SIGCONT)
        gate.open()   # it now checks its micro-batch, and fails
        assert finish(watcher, project) == 0, project.watch_output()
    finally:
        gate.close()
    incident = assert_recovered_by(project, "oom")
    assert incident["trainer_exit_code"] == 1 and len(project.incidents()) == 1, project.incidents()
    assert incident["config_changes"]["micro_batch_size"] == [8, 4]
    first_log = trainer_logs(project)[0].read_text()
    assert "MemoryError: toy cannot fit micro-batch 8" in first_log   # the re-attached trainer's own failure
    exited = [e for e in journal(project) if e["kind"] == "trainer_exited"]
    assert (exited[0]["pid"], exited[0]["exit_code"]) == (trainer_pid, 1)
    assert len(gate.launches) == 2   # the held one and the relaunch: the gate let both through
    project.assert_same_result_as(reference_run)   # the micro-batch changes no step of the toy's


def test_a_nan_crash_of_a_reattached_trainer_is_rolled_back(project, tmp_path):
    # Without loss-spike: the NaN path is what is exercised; and without diverged-at-end: at lr 5 the toy still
    # diverges (slowly: finite for 250 steps), so this run ends diverged by design.
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    for source in (REPO / "playbooks").glob("*.yaml"):
        if source.name not in ("loss_spike.yaml", "diverged_at_end.yaml"):
            (playbooks / source.name).write_text(without_loss_spike(source.read_text()))
    # At lr 10 the toy's loss grows 81-fold a step: step 161 prints `loss inf` and step 162 crashes (OverflowError,
    # exit 1) a few milliseconds later at this pace, before the watcher can stop it (if it does, it stopped a live
    # trainer showing loss inf, also the nan playbook's). At lr 5 the loss stays finite for 250 steps.
    # The gate holds the first trainer before its first step until a new watcher has re-attached to it.
    gate = StartGate(tmp_path / "start-gate")
    project.set(lr=10.0, max_tokens=180 * 16 * 64, playbooks={"paths": [str(playbooks)], "shipped": False})
    pace(project, 0.005, env_file=str(gate.path))
    try:
        watcher, trainer_pid = restart_watcher_around_a_held_trainer(project, after_progress_lines=0)
        os.kill(trainer_pid, signal.SIGCONT)
        gate.open()
        assert finish(watcher, project) == 0, project.watch_output()
    finally:
        gate.close()
    incident = assert_recovered_by(project, "nan")
    assert incident["config_changes"]["lr"] == [10.0, 5.0]
    assert incident["resumed_step"] is None or incident["resumed_step"] < incident["step_at_failure"]   # rolled back
    # The re-attached trainer's end: its crash, whose exit code its launcher recorded, or the playbook's stop. The
    # playbook may fire on `loss inf` and its stop find the trainer crashed a moment before (CI saw it): the stop
    # then records the exit code the launcher wrote.
    entries = [e for e in journal(project) if e.get("pid") == trainer_pid]
    exited = [e["exit_code"] for e in entries if e["kind"] == "trainer_exited"]
    stopped = [e["detail"] for e in entries if e["kind"] == "trainer_stopped"]
    crashed_first = stopped == ["trainer was not running (it had exited 1)"]
    assert exited == [1] or crashed_first or (stopped and "not running" not in stopped[0]), entries
    assert project.final_state()["step"] == 180


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_a_trainer_gone_with_its_launcher_is_an_unknown_exit_that_is_verified_and_resumed(project, reference_run):
    """Where the exit truly cannot be known (trainer and launcher SIGKILLed together while no watcher
    ran), the failure is a crash of unknown cause: verified and resumed, not escalated."""
    pace(project, 0.2)   # 40 steps: 8 s; both are killed in the 30 steps after checkpoint 10
    first = project.watch(env=ENV)
    try:
        wait_for(lambda: project.saved(10), 120, what="checkpoint 10")
        trainer_pid = project.trainer_pid()
        status_file = project.run_dir / "launches" / "launch-001" / "exit-status.json"
        launcher_pid = read_exit_status(status_file)["launcher_pid"]
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        os.killpg(os.getpgid(trainer_pid), signal.SIGKILL)   # the whole session: trainer and launcher
        wait_for(lambda: not TrainerProcess.attach(trainer_pid, project.run_dir / "x.log").alive, 30, what="trainer gone")
    finally:
        stop_process(first)
    assert "exit_code" not in read_exit_status(status_file) and launcher_pid != trainer_pid
    assert not (project.out_dir / "final").exists(), "the toy finished first: slow its pace"

    second = project.watch(env=ENV)
    assert finish(second, project) == 0, project.watch_output()
    [incident] = project.incidents()
    assert incident["playbook"] == "unknown-exit" and incident["outcome"] == "recovered"
    resumed = [e["resume_from"] for e in journal(project) if e["kind"] == "launch"][1]   # resumed, not from scratch
    assert resumed and project.layout.step_in_path(resumed) >= 10, resumed
    project.assert_same_result_as(reference_run)   # counters and bit-identical weights
