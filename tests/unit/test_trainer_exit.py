"""A trainer that has just ended while its launcher has not yet recorded the exit (engine/process/trainer_process.py):
`alive` answers at once, alive with `exit_pending`, and the watch loop decides nothing on it; the exit recorded,
the trainer is dead with its exit code. Real processes: the launcher is held with SIGSTOP so its write waits."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from engine.process import trainer_process
from engine.process.trainer_process import TrainerProcess, read_exit_status
from engine.trainers.base import LaunchSpec
from tests.conftest import wait_for

REPO = Path(__file__).resolve().parents[2]


def test_a_just_ended_trainer_is_exit_pending_without_waiting_then_dead_with_its_code(tmp_path):
    go = tmp_path / "go"
    script = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)\nraise SystemExit(3)\n"
    spec = LaunchSpec(argv=[sys.executable, "-c", script], env=dict(os.environ), cwd=REPO, config_file=Path("-"),
                      resume_from=None)
    process = TrainerProcess.launch(spec, tmp_path / "trainer.log", tmp_path / "exit-status.json")
    launcher_pid = read_exit_status(process.status_path)["launcher_pid"]
    try:
        assert process.alive and not process.exit_pending
        os.kill(launcher_pid, signal.SIGSTOP)   # its launcher cannot reap the trainer nor write its exit
        go.touch()
        wait_for(lambda: process.exit_pending, 30, interval=0.01, what="the trainer to end")
        # Ended, the exit not yet written: alive and pending, answered at once (it used to wait up to 2 s and
        # then answer dead with no exit code, which only the unknown-exit playbook could match).
        assert process.alive and process.exit_pending and process.poll() is None
        os.kill(launcher_pid, signal.SIGCONT)
        wait_for(lambda: not process.alive, 30, interval=0.01, what="the launcher to record the exit")
        assert process.poll() == 3 and not process.exit_pending
        # A stop that comes a moment too late (a playbook that fired before the crash) records how it ended.
        assert process.stop(grace_s=1.0) == "trainer was not running (it had exited 3)"
    finally:
        # the launcher may be gone already: it exits once it has recorded the exit, and being our child it is
        # reaped when the test reads the exit (seen once in a full run: ProcessLookupError here, after a pass)
        with contextlib.suppress(ProcessLookupError):
            os.kill(launcher_pid, signal.SIGCONT)


def test_a_launcher_that_never_writes_is_waited_for_at_most_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(trainer_process, "LAUNCHER_WRITE_WAIT_S", 0.5)
    spec = LaunchSpec(argv=[sys.executable, "-c", "raise SystemExit(0)"], env=dict(os.environ), cwd=REPO,
                      config_file=Path("-"), resume_from=None)
    process = TrainerProcess.launch(spec, tmp_path / "trainer.log", tmp_path / "exit-status.json")
    launcher_pid = read_exit_status(process.status_path)["launcher_pid"]
    os.kill(launcher_pid, signal.SIGSTOP)
    try:
        wait_for(lambda: not process.alive, 30, interval=0.01, what="the bound to pass")
        assert not process.exit_pending and process.poll() is None   # dead, its exit unknown: said so, not waited on
        assert process.stop(grace_s=1.0) == "trainer was not running"
    finally:
        # the launcher may be gone already: it exits once it has recorded the exit, and being our child it is
        # reaped when the test reads the exit (seen once in a full run: ProcessLookupError here, after a pass)
        with contextlib.suppress(ProcessLookupError):
            os.kill(launcher_pid, signal.SIGCONT)
    time.sleep(0.1)
