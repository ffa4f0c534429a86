"""An incident is recovered only when its relaunch trained (issue 44 item 7): the toy's micro-batch 8 does not
fit above 2, so the oom playbook's first halving (8 -> 4) fails again at start-up before any step; that first
incident is `failed`, the second (4 -> 2) `recovered`. A real `runbook watch` of the toy trainer."""

from __future__ import annotations

import pytest

from tests.conftest import REPO, stop_process
from tests.trainers.projects import TRAINERS, make_project

pytestmark = pytest.mark.slow


def test_a_relaunch_that_fails_before_training_leaves_its_incident_failed_not_recovered(tmp_path):
    project = make_project(tmp_path / "project", TRAINERS["toy"], micro_batch_size=8, batch_size=16)
    project.set(trainer={"extra": {"step_seconds": 0.03, "oom_above_micro_batch": 2}})
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        assert watcher.wait(timeout=120) == 0, project.watch_output()
    finally:
        stop_process(watcher)
    incidents = project.incidents()
    assert [(i["playbook"], i["outcome"]) for i in incidents] == [("oom", "failed"), ("oom", "recovered")], incidents
    assert any(n.startswith("not recovered: the trainer failed again before making progress") for n in incidents[0]["notes"])
    log = project.run_log.read_text()
    assert "not recovered: restarted from scratch, but the trainer failed again before making progress" in log
    assert "until a person acts" not in log   # the watcher went on: nobody was called for it
