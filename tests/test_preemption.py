"""Preemption end to end: SIGTERM the real trainer after its second checkpoint; runbook brings it back."""

from __future__ import annotations

import os
import signal

from tests.conftest import stop_process, wait_for


def test_sigterm_after_second_checkpoint_is_resumed_to_the_same_steps_and_tokens(project, reference_run):
    watcher = project.watch()
    try:
        wait_for(lambda: (project.step_dir(20) / "lit_model.pth").exists(), 240, what="second checkpoint")
        wait_for(lambda: (project.step_dir(20) / "model_config.yaml").exists(), 30, what="save finished")
        trainer_pid = project.trainer_pid()
        os.kill(trainer_pid, signal.SIGTERM)
        assert watcher.wait(timeout=300) == 0, project.watch_output()
    finally:
        stop_process(watcher)

    incidents = project.incidents()
    assert len(incidents) == 1, [i["playbook"] for i in incidents]
    incident = incidents[0]
    assert incident["playbook"] == "preemption"
    assert incident["outcome"] == "recovered"
    assert incident["trainer_exit_code"] == -signal.SIGTERM
    assert incident["resumed_step"] >= 20
    assert incident["steps_lost"] == incident["step_at_failure"] - incident["resumed_step"]

    # Same optimizer steps and tokens as an undisturbed run.
    assert project.final_progress() == reference_run["progress"]

    # A second launch really resumed from the checkpoint file, and the incident reached the run log.
    journal = (project.run_dir / "journal.jsonl").read_text()
    assert '"kind": "launch", "launch": 2' in journal
    assert f"step-{incident['resumed_step']:08d}/lit_model.pth" in journal
    run_log = project.run_log.read_text()
    assert incident["id"] in run_log and "preemption" in run_log
    # `last` points at the newest verified checkpoint.
    assert os.readlink(project.out_dir / "last") == "step-00000040"
