"""`runbook status` once the run is over: the watcher's last heartbeat (upkeep's, every 30 s) may have been written
while the trainer ran, and status said "trainer alive True" under "state completed" (QA, issue 44). A real toy
run, then the real command."""

from __future__ import annotations

import json
import os
import subprocess
import time

from tests.conftest import REPO, RUNBOOK, make_toy_project, run_watch


def test_status_of_a_completed_run_says_its_trainer_is_not_alive(tmp_path):
    project = make_toy_project(tmp_path)
    run_watch(project)
    # The heartbeat as upkeep writes it mid-run (engine/watch/upkeep.py): whether this short run's own start
    # heartbeat lands before or after the trainer's launch is timing, so its mid-run one is written here.
    (project.run_dir / "heartbeat.json").write_text(json.dumps(
        {"time": time.time() - 5, "watcher_pid": os.getpid(), "step": 38, "trainer_alive": True, "status": {}}))
    done = subprocess.run([RUNBOOK, "status", str(project.config)], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr   # completed
    assert "state     completed" in done.stdout and "trainer   not running" in done.stdout, done.stdout
    [beat] = [line for line in done.stdout.splitlines() if line.startswith("heartbeat")]
    assert beat.endswith("step 38, trainer alive False (it exited)"), done.stdout
