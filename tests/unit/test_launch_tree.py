"""A launch is over only when all of it is (engine/process/launcher.py as its launch's subreaper): what the
trainer leaves behind - a `setsid` child, torchrun's workers when torchrun itself is killed - is killed and
reaped before the exit is recorded. Real processes: the launcher run by path, as the watcher runs it."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil

from engine.process.launch_spec import LAUNCHER

# The "trainer": starts a child in its own session that would run for a minute, writes its pid, exits 0.
TRAINER = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
open(sys.argv[1], "w").write(str(child.pid))
"""


def test_a_setsid_child_the_trainer_leaves_is_killed_before_the_exit_is_recorded(tmp_path):
    status, pid_file = tmp_path / "status.json", tmp_path / "child.pid"
    done = subprocess.run([sys.executable, str(LAUNCHER), str(status), "--", sys.executable, "-c", TRAINER, str(pid_file)],
                          capture_output=True, text=True, timeout=30)
    child = int(pid_file.read_text())
    recorded = json.loads(status.read_text())
    assert done.returncode == 0 and recorded["exit_code"] == 0
    assert recorded["leftovers_killed"] == [child]
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    assert "leaving 1 process(es)" in done.stderr


def test_workers_of_a_killed_launcher_process_are_ended_with_the_launch(tmp_path):
    """torchrun stopped with a signal it does not forward (SIGUSR2's default action ends it at once): its
    workers, in a session of their own, outlived it before (3 of 3 hang runs)."""
    status, pid_file = tmp_path / "status.json", tmp_path / "child.pid"
    agent = TRAINER + "import time; time.sleep(60)\n"
    launcher = subprocess.Popen([sys.executable, str(LAUNCHER), str(status), "--", sys.executable, "-c", agent, str(pid_file)])
    deadline = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    trainer = json.loads(status.read_text())["trainer_pid"]
    worker = int(pid_file.read_text())
    psutil.Process(trainer).send_signal(12)   # SIGUSR2
    assert launcher.wait(timeout=20) == 128 + 12
    assert json.loads(status.read_text())["leftovers_killed"] == [worker]
    assert not psutil.pid_exists(worker) or psutil.Process(worker).status() == psutil.STATUS_ZOMBIE
