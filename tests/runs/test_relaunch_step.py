"""Where a relaunch is before it prints a step: at the checkpoint it resumed from, not at the old process's last
line (engine/observe/observer.py MetricTracker.new_launch). A real toy run whose lr jumps to 3.5 at update 12
(loss-spike: rolled back, relaunched from checkpoint 10 at a lower lr) and whose resumed launches die of a
MemoryError in their start-up: the OOM incident is at step 10 with nothing lost, where it said the spike's last
step read and counted the steps the rollback had already lost a second time."""

from __future__ import annotations

import pytest

from tests.conftest import REPO, make_toy_project, stop_process


@pytest.mark.slow
def test_a_relaunch_that_dies_before_its_first_step_is_at_the_step_it_resumed_from(tmp_path):
    project = make_toy_project(tmp_path / "project", step_seconds=0.02, save_interval=5)
    project.set(trainer={"extra": {"step_seconds": 0.02, "lr_jump": {"at_step": 12, "lr": 3.5},
                                   "start_error": {"line": "MemoryError: toy cannot fit its resumed state",
                                                   "resumed_only": True}}})
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        watcher.wait(timeout=120)
    finally:
        stop_process(watcher)
    incidents = project.incidents()
    assert [i["playbook"] for i in incidents][:2] == ["loss-spike", "oom"], \
        ([(i["playbook"], i["outcome"]) for i in incidents], project.watch_output()[-3000:])
    spike, oom = incidents[0], incidents[1]
    assert spike["resumed_step"] == spike["rollback_target_step"] < spike["step_at_failure"], spike
    # the relaunch never printed a step: it was at the checkpoint it resumed from, and lost nothing of its own
    assert oom["step_at_failure"] == spike["resumed_step"] and oom["steps_lost"] == 0, oom
    assert oom["tokens_at_failure"] is None, oom   # its micro-batch count is unknown until it prints one
