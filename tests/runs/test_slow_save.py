"""A checkpoint save longer than the hang timeout is not a hang while it works, and still is one when
it stops (engine/core/state.py `stall`, phase "saving"; engine/observe/activity.py).

The hang timeout is learnt from the gaps between progress lines: before a launch's first save it is
the floor. A save that outlasts it (a big model's first save, or any save on a loaded machine) was
stopped as a hang. The toy trainer (a real process) writes each save in pieces over SAVE_SECONDS,
past a HANG_FLOOR_S timeout.
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.conftest import REPO, stop_process, wait_for
from tests.runs.test_toy_trainer import STEPS, final_state, make_toy_project, run_toy

SAVE_INTERVAL, SAVE_SECONDS, HANG_FLOOR_S = 20, 4.0, 3.0


def slow_saving_project(root, **extra):
    project = make_toy_project(root)
    project.set(save_interval=SAVE_INTERVAL,
                trainer={"extra": {"step_seconds": 0.03, "save_seconds": SAVE_SECONDS, **extra}},
                watch={"hang_floor_s": HANG_FLOOR_S, "hang_timeout_s": 60.0})
    return project


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_saves_longer_than_the_hang_timeout_that_keep_writing_are_not_hangs(tmp_path):
    project = slow_saving_project(tmp_path / "project")
    seconds = run_toy(project, timeout=120)
    assert project.incidents(include_slow=True) == [], project.watch_output()
    assert final_state(project)["step"] == STEPS
    # Three saves (steps 20, 40 and the final one), each longer than the timeout learnt before it.
    assert seconds > 3 * SAVE_SECONDS, seconds


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_a_save_that_stops_is_a_hang_named_as_a_save_and_the_run_resumes(tmp_path):
    project = slow_saving_project(tmp_path / "project", slow_from_scratch_only=True)   # the relaunch saves at once
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        log = project.run_dir / "logs"
        wait_for(lambda: any("saving" in p.read_text(errors="replace") and "ckpt-000040" in p.read_text(errors="replace")
                             for p in log.glob("*.log")), timeout=90, what="the save of step 40 to begin")
        pid = project.trainer_pid()
        os.kill(pid, signal.SIGSTOP)   # frozen mid-save: no output, no CPU, no I/O
        assert watcher.wait(timeout=120) == 0, project.watch_output()
    finally:
        stop_process(watcher)
    [incident] = project.incidents(include_slow=True)
    assert incident["playbook"] == "hang" and incident["outcome"] == "recovered", incident
    note = " ".join(str(v) for v in incident.get("notes", [])) or str(incident)
    assert "saving for" in note and "no sign of life" in note, note
    assert incident["resumed_step"] == SAVE_INTERVAL      # the frozen save of step 40 was never sealed
    assert final_state(project)["step"] == STEPS
