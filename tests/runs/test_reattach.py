"""A trainer's exit is known whoever started it: a re-attached trainer's failure is recovered by the
same playbook as a watched one (its launcher parent records the exit in the run folder).

Each test: the watcher is SIGKILLed while the trainer is held still (SIGSTOP), a new watcher
re-attaches, and only then does the trainer fail, from outside (SIGTERM, SIGKILL) or by itself
(a memory limit under a huge micro-batch, a diverging lr).
"""

from __future__ import annotations

import json
import os
import signal

from engine.process.trainer_process import TrainerProcess, read_exit_status
from tests.conftest import REPO, stop_process, wait_for
from tests.runs.test_dynamics_faults import without_loss_spike
import pytest


# Transitional: these tests still run the real litgpt trainer (tests/conftest.py's `project` is the toy's).
@pytest.fixture
def project(litgpt_project):
    return litgpt_project


@pytest.fixture
def reference_run(litgpt_reference_run):
    return litgpt_reference_run



def journal(project) -> list[dict]:
    path = project.run_dir / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def progress_lines(project) -> int:
    logs = sorted((project.run_dir / "logs").glob("trainer-*.log")) if (project.run_dir / "logs").exists() else []
    return sum(1 for log in logs for line in log.read_text(errors="replace").splitlines() if line.startswith("Epoch "))


def restart_watcher_around_a_held_trainer(project, after_progress_lines: int) -> tuple:
    """Start a watcher, hold the trainer once it has printed that many progress lines, SIGKILL the
    watcher and start a new one; return (new watcher, trainer pid) once it has re-attached."""
    first = project.watch()
    try:
        wait_for(lambda: (project.run_dir / "trainer.pid").exists() and progress_lines(project) >= after_progress_lines,
                 240, what=f"{after_progress_lines} progress lines")
        trainer_pid = project.trainer_pid()
        os.kill(trainer_pid, signal.SIGSTOP)
        first.send_signal(signal.SIGKILL)   # the watcher dies; the trainer and its launcher live on
        first.wait(timeout=30)
    finally:
        stop_process(first)
    second = project.watch()
    wait_for(lambda: any("re-attached to trainer pid" in e.get("reason", "") for e in journal(project)), 60,
             what="re-attach")
    return second, trainer_pid


def finish(watcher, project, timeout=600) -> int:
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
    logs = sorted((project.run_dir / "logs").glob("trainer-*.log")) if (project.run_dir / "logs").exists() else []
    return sum(1 for line in logs[-1].read_text(errors="replace").splitlines() if line.startswith("Epoch ")) if logs else 0


def replace_watcher_around_the_held_trainer(project, watcher) -> tuple:
    """Hold the running trainer, SIGKILL its watcher and start a new one; return it and the trainer pid
    once it has re-attached."""
    attached = sum("re-attached to trainer pid" in e.get("reason", "") for e in journal(project))
    trainer_pid = project.trainer_pid()
    os.kill(trainer_pid, signal.SIGSTOP)
    watcher.send_signal(signal.SIGKILL)
    watcher.wait(timeout=30)
    second = project.watch()
    wait_for(lambda: sum("re-attached to trainer pid" in e.get("reason", "") for e in journal(project)) > attached, 60,
             what="re-attach")
    return second, trainer_pid


# A SIGTERM is litgpt's notice: it saves the step it is in and exits 75 (engine/trainers/litgpt/notice_save.py).
# One run, two re-attaches: each signal is recovered by its own playbook, and the run ends at the undisturbed counts.
def test_a_signal_to_a_reattached_trainer_is_recovered_by_its_own_playbook(project, reference_run):
    expected = [(signal.SIGKILL, "killed", -9), (signal.SIGTERM, "preemption", 75)]
    watcher, trainer_pid = restart_watcher_around_a_held_trainer(project, after_progress_lines=12)
    pids = []
    try:
        for n, (sig, _playbook, _code) in enumerate(expected):
            if n:   # the relaunched trainer, once it has trained past the first incident's checkpoint
                wait_for(lambda: sum(e["kind"] == "launch" for e in journal(project)) == 2
                         and newest_log_progress_lines(project) >= 8, 240, what="the relaunched trainer's progress")
                watcher, trainer_pid = replace_watcher_around_the_held_trainer(project, watcher)
            os.kill(trainer_pid, sig)
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


def test_an_oom_of_a_reattached_trainer_halves_the_micro_batch(project):
    project.set(micro_batch_size=512, batch_size=512, max_tokens=65536, save_interval=1,
                trainer={"memory_limit_mb": 1300, "device": "cpu"})
    watcher, trainer_pid = restart_watcher_around_a_held_trainer(project, after_progress_lines=0)
    os.kill(trainer_pid, signal.SIGCONT)   # it now allocates its first micro-batch, and fails
    assert finish(watcher, project) == 0, project.watch_output()
    incident = assert_recovered_by(project, "oom")
    assert incident["config_changes"]["micro_batch_size"] == [512, 256]
    assert project.final_progress()["step_count"] == 2


def test_a_nan_crash_of_a_reattached_trainer_is_rolled_back(project, tmp_path):
    playbooks = tmp_path / "playbooks"   # without loss-spike: the NaN path is what is exercised
    playbooks.mkdir()
    for source in (REPO / "playbooks").glob("*.yaml"):
        if source.name != "loss_spike.yaml":
            (playbooks / source.name).write_text(without_loss_spike(source.read_text()))
    project.set(lr=10.0, playbooks={"paths": [str(playbooks)], "shipped": False})
    watcher, trainer_pid = restart_watcher_around_a_held_trainer(project, after_progress_lines=1)
    os.kill(trainer_pid, signal.SIGCONT)
    assert finish(watcher, project) == 0, project.watch_output()
    incident = assert_recovered_by(project, "nan")
    assert incident["config_changes"]["lr"] == [10.0, 5.0]


def test_a_trainer_gone_with_its_launcher_is_an_unknown_exit_that_is_verified_and_resumed(project, reference_run):
    """Where the exit truly cannot be known (trainer and launcher SIGKILLed together while no watcher
    ran), the failure is a crash of unknown cause: verified and resumed, not escalated."""
    first = project.watch()
    try:
        wait_for(lambda: (project.step_dir(10) / "model_config.yaml").exists(), 240, what="checkpoint 10")
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

    second = project.watch()
    assert finish(second, project) == 0, project.watch_output()
    [incident] = project.incidents()
    assert incident["playbook"] == "unknown-exit" and incident["outcome"] == "recovered"
    project.assert_same_result_as(reference_run)   # counters and bit-identical weights
