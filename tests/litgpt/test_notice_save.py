"""The litgpt contract, notice save as runbook drives it (engine/trainers/litgpt/notice_save.py): the watcher's
own SIGTERM is forwarded, the real litgpt trainer saves the step it is in and the next watch resumes it with
no step lost; a kill -9 in the middle of a notice save (runbook's staging inside litgpt's loop) leaves nothing
a resume trusts, and the previous verified checkpoint is used."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import psutil
import pytest

from engine.process.launcher import parse_args
from engine.trainers.litgpt.notice_save import NOTICE_EXIT_CODE, notice_signals, staging_dir
from runbook.exit_codes import ExitCode
from tests.conftest import stop_process, wait_for


PROGRESS_STEP = re.compile(rb"^Epoch \d+ \| iter \d+ step (\d+) \|", re.M)


def last_step(log) -> int:
    steps = PROGRESS_STEP.findall(log.read_bytes()) if log.exists() else []
    return int(steps[-1]) if steps else 0


def stop_between_saves(pid: int, log, after: int, save_interval: int) -> int:
    """SIGSTOP the trainer once it is past `after`, at a step whose notice save (at that step or the next)
    cannot coincide with a scheduled save; returns the last step it printed."""
    for _ in range(200):
        wait_for(lambda: last_step(log) > after, 120, interval=0.01, what=f"a step after {after}")
        os.kill(pid, signal.SIGSTOP)
        time.sleep(0.05)   # the last line it wrote before stopping is in the file
        step = last_step(log)
        if step % save_interval not in (0, save_interval - 1):
            return step
        os.kill(pid, signal.SIGCONT)
        after = step
    raise AssertionError("never stopped between scheduled saves")


def test_notice_signals_come_from_the_environment_and_staging_is_never_a_resume_candidate(tmp_path):
    assert notice_signals({"RUNBOOK_NOTICE_SIGNALS": "SIGTERM, SIGUSR1"}) == [signal.SIGTERM, signal.SIGUSR1]
    assert notice_signals({}) == []
    folder = staging_dir(tmp_path, 23, {"TMPDIR": str(tmp_path / "missing")})
    # litgpt's --resume auto takes out_dir.rglob("step-*/*.pth"): the staging folder never has that shape.
    assert folder.parent == tmp_path and not folder.name.startswith("step-") and "00000023" in folder.name


def test_the_launcher_keeps_the_stop_signals_and_refuses_a_bad_command_line():
    assert parse_args(["s.json", "--notice-signal", "SIGTERM", "--quit-signal", "SIGUSR2", "--", "python", "-V"]) == (
        "s.json", {"notice_signal": "SIGTERM", "quit_signal": "SIGUSR2"}, ["python", "-V"])
    assert parse_args(["s.json", "--", "python"]) == ("s.json", {}, ["python"])
    for bad in (["s.json", "python"], ["s.json", "--"], ["s.json", "--notice-signal", "SIGNOPE", "--", "x"],
                ["s.json", "--notice-signal", "--", "x"], ["s.json", "--bogus", "SIGTERM", "--", "x"]):
        assert parse_args(bad) is None, bad


def test_sigusr2_and_uncatchable_signals_are_refused_as_notices():
    from engine.core.config import TrainerSettings

    assert TrainerSettings().notice_signals == ["SIGTERM", "SIGUSR1"]
    for bad in (["SIGUSR2"], ["SIGKILL"], ["SIGSTOP"]):
        with pytest.raises(ValueError, match="notice_signals"):
            TrainerSettings(notice_signals=bad)


def test_watcher_sigterm_saves_the_step_then_a_kill_mid_notice_save_falls_back_to_the_verified_one(litgpt_project, litgpt_reference_run):
    project = litgpt_project
    logs = project.run_dir / "logs"
    # 1. The watcher is told to stop (Spot shutdown, SLURM): it forwards the notice and waits for the save.
    watcher = project.watch()
    try:
        wait_for(lambda: project.step_dir(10).joinpath("model_config.yaml").exists(), 240, what="the first checkpoint")
        noticed_step = stop_between_saves(project.trainer_pid(), logs / "trainer-001.log", 11, 10)
        watcher.send_signal(signal.SIGTERM)   # the trainer is stopped: give_notice continues it first
        assert watcher.wait(timeout=120) == ExitCode.INTERRUPTED, project.watch_output()
    finally:
        stop_process(watcher)
    status = json.loads((project.run_dir / "launches" / "launch-001" / "exit-status.json").read_text())
    assert status["exit_code"] == NOTICE_EXIT_CODE, status
    saved = [s for s in (noticed_step, noticed_step + 1) if project.step_dir(s).exists()]
    assert len(saved) == 1, sorted(p.name for p in project.out_dir.iterdir())
    saved_step = saved[0]
    assert last_step(logs / "trainer-001.log") == saved_step   # the step it was in, finished, then saved
    journal = (project.run_dir / "journal.jsonl").read_text()
    assert '"kind": "trainer_noticed"' in journal and f"exited {NOTICE_EXIT_CODE}" in journal

    # 2. The next watch resumes from the notice save; its own notice save is killed half-way (the whole
    # save in staging, not yet renamed into out_dir). Its relaunch is a warm spare (trainer.warm_spare).
    project.set(trainer={"warm_spare": True})
    watcher = project.watch(env={"RUNBOOK_CRASH_AT": "notice-save-staged"})
    try:
        wait_for(lambda: last_step(logs / "trainer-002.log") > 0, 240, interval=0.01, what="launch 2's first step")
        pid = project.trainer_pid()
        killed_at = stop_between_saves(pid, logs / "trainer-002.log", saved_step, 10)
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGCONT)
        assert watcher.wait(timeout=300) == 0, project.watch_output()
    finally:
        stop_process(watcher)
    log2 = (logs / "trainer-002.log").read_text()
    assert f"Resuming training from {project.step_dir(saved_step) / 'lit_model.pth'}" in log2
    assert "runbook: SIGTERM received" in log2 and "notice save of step" not in log2   # killed before it completed
    incidents = project.incidents()
    # The notice reached the trainer (its log says so), then a SIGKILL ended it before the save completed:
    # a preemption whose grace ran out (preemption.yaml's log clause), not a bare kill -9.
    assert [i["playbook"] for i in incidents] == ["preemption"], incidents
    previous = max(saved_step, killed_at // 10 * 10)
    assert incidents[0]["resumed_step"] == previous and incidents[0]["outcome"] == "recovered"
    for step in (killed_at, killed_at + 1):
        assert not project.step_dir(step).exists(), step   # the half-done save never reached out_dir
    assert not list(project.out_dir.rglob("notice-save-*")), "the staging folder outlived the relaunch"
    project.assert_same_result_as(litgpt_reference_run)   # counters and bit-identical weights
    # The relaunch was the spare made while launch 2 trained, and the watcher left no spare behind.
    assert (logs / "trainer-003.log").read_text().startswith("runbook: warm spare pid")
    status3 = json.loads((project.run_dir / "launches" / "launch-003" / "exit-status.json").read_text())
    assert status3["exit_code"] == 0   # the spare's launcher recorded the adopted launch's exit in its own file
    spares = [p for p in psutil.process_iter(["cmdline"]) if "engine.process.spare_main" in (p.info["cmdline"] or [])
              and any(str(project.run_dir) in arg for arg in p.info["cmdline"])]
    assert spares == [], spares
