"""A run that ends diverged is not completed (issue 48 item 4): the trainer exits 0 with final/ saved, but its
loss ended above where the run started; `diverged-at-end` escalates it with the loss curve, where the watcher
used to report "completed".

A real toy trainer at the shipped config's lr (0.003: its loss falls ~0.6% a step) whose lr jumps to 3.5 at update
38 of 40: the error of its weights then grows 2.5x a step, so its last three losses are ~6x, ~39x and ~244x the
loss before (pure Python arithmetic: the same on every machine). Three lines above 2x the best is one short of
loss-spike's four, so nothing acts before the exit."""

from __future__ import annotations

import pytest

from tests.conftest import REPO, make_toy_project, stop_process

def watch_exit_code(project) -> int:
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})   # the watcher imports tests.toy_trainer
    try:
        return watcher.wait(timeout=120)
    finally:
        stop_process(watcher)


@pytest.mark.slow
def test_a_toy_run_whose_loss_climbs_over_its_last_steps_is_escalated_not_completed(tmp_path):
    project = make_toy_project(tmp_path / "project", step_seconds=0.02)
    project.set(trainer={"extra": {"step_seconds": 0.02, "lr_jump": {"at_step": 38, "lr": 3.5}}})
    assert watch_exit_code(project) == 4, project.watch_output()   # escalated
    [incident] = project.incidents()
    assert incident["playbook"] == "diverged-at-end" and incident["outcome"] == "escalated", incident
    assert (project.out_dir / "final").is_dir()   # nothing of the run was touched: a human decides
    assert "not completed" in str(incident) and "Last losses:" in str(incident), sorted(incident)
    assert "diverged-at-end" in (project.root / "docs" / "run-log.md").read_text()


@pytest.mark.slow
def test_the_same_run_without_the_jump_completes(tmp_path):
    project = make_toy_project(tmp_path / "project", step_seconds=0.02)
    assert watch_exit_code(project) == 0, project.watch_output()
    assert project.incidents() == []
