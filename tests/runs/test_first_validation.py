"""The run's first validation is not a hang while it computes, and still is one when it stops
(engine/observe/observer.py phase "validating"; engine/core/state.py `stall`).

litgpt prints `Validating ...`, then nothing until the result. The hang timeout is learnt from the gaps
between progress lines, and before the first validation no gap has held one: a validation longer than
that timeout (a real validation set is minutes) was stopped as a hang. The toy trainer (a real process)
announces its validation in litgpt's words and computes for VALIDATE_SECONDS, past a HANG_FLOOR_S timeout.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.conftest import REPO, stop_process, wait_for
from tests.runs.test_toy_trainer import STEPS, final_state, make_toy_project, run_toy

VALIDATE_INTERVAL, VALIDATE_SECONDS, HANG_FLOOR_S = 20, 6.0, 2.0   # the floor is above activity's 1 s sampling


def validating_project(root, **extra):
    project = make_toy_project(root)
    project.set(save_interval=10,
                trainer={"extra": {"step_seconds": 0.03, "validate_interval": VALIDATE_INTERVAL,
                                   "validate_seconds": VALIDATE_SECONDS, **extra}},
                watch={"hang_floor_s": HANG_FLOOR_S, "hang_safety_factor": 2.0, "hang_timeout_s": 60.0})
    return project


def test_a_first_validation_longer_than_the_learnt_timeout_is_not_a_hang(tmp_path):
    project = validating_project(tmp_path / "project")
    seconds = run_toy(project, timeout=120)
    assert project.incidents(include_slow=True) == [], project.watch_output()
    assert final_state(project)["step"] == STEPS
    # Two validations (steps 20 and 40): the first past the learnt floor, the second inside the gap it taught.
    assert seconds > 2 * VALIDATE_SECONDS, seconds


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_a_trainer_frozen_in_its_first_validation_is_a_hang_named_so_and_the_run_resumes(tmp_path):
    project = validating_project(tmp_path / "project", slow_from_scratch_only=True)   # the relaunch validates at once
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        logs = project.run_dir / "logs"
        wait_for(lambda: any("Validating ..." in p.read_text(errors="replace") for p in logs.glob("*.log")),
                 timeout=90, what="the first validation to begin")
        os.kill(project.trainer_pid(), signal.SIGSTOP)   # frozen mid-validation: no output, no CPU, no I/O
        assert watcher.wait(timeout=120) == 0, project.watch_output()
    finally:
        stop_process(watcher)
    [incident] = project.incidents(include_slow=True)
    assert incident["playbook"] == "hang" and incident["outcome"] == "recovered", incident
    text = json.dumps(incident)
    assert "in the run's first validation for" in text and "no sign of life (output, CPU, I/O)" in text, text
    # The step-20 checkpoint comes after its validation: 10 when the stop landed mid-validation; 20 when a loaded
    # machine let the validation end (and its save seal) before the stop, the phase lasting to the next progress line
    assert incident["resumed_step"] in (10, 20), incident
    assert final_state(project)["step"] == STEPS
