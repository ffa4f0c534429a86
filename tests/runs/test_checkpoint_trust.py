"""Checkpoint trust chain (issue 48 item 3): a divergence within watch.suspect_within_steps (default save_interval)
after resuming from checkpoint C marks C suspect: its manifest says why, it moves to the quarantine (kept), and the
rollback resumes from an older one; `runbook verify` names it.

A real toy trainer whose lr jumps to 3.5 at update 12 of every launch (a poison at a fixed step, as a bad window
of data would be): it diverges at 12 from scratch (loss-spike rolls back to checkpoint 10, no suspect: the launch
resumed from nothing), then again 1 step after resuming from checkpoint 10, which is therefore suspect: the
second rollback resumes from checkpoint 5. Pure arithmetic: the same steps on every machine."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import REPO, RUNBOOK, make_toy_project, stop_process


@pytest.mark.slow
def test_a_divergence_soon_after_resuming_from_a_checkpoint_marks_it_suspect_and_resumes_from_an_older_one(tmp_path):
    project = make_toy_project(tmp_path / "project", step_seconds=0.02, save_interval=5)
    project.set(trainer={"extra": {"step_seconds": 0.02, "lr_jump": {"at_step": 12, "lr": 3.5}}})
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        code = watcher.wait(timeout=120)
    finally:
        stop_process(watcher)
    incidents = project.incidents()
    assert code == 4 and [i["playbook"] for i in incidents][:2] == ["loss-spike", "loss-spike"], \
        ([(i["playbook"], i["outcome"]) for i in incidents], project.watch_output()[-3000:])
    first, second = incidents[0], incidents[1]
    assert "marked suspect" not in json.dumps(first) and first["rollback_target_step"] == 10, first
    assert "checkpoint 10 marked suspect" in json.dumps(second) and second["rollback_target_step"] == 5, second

    [moved] = [p for p in (project.run_dir / "quarantine").iterdir() if (p / "QUARANTINE_REASON.txt").read_text().startswith("suspect:")][:1]
    assert moved.name.startswith("ckpt-000010-")
    manifest = json.loads((moved / "runbook-manifest.json").read_text())
    assert "began at step 11, 1 step(s) after resuming from it" in manifest["suspect"]["reason"], manifest
    journal = [json.loads(line) for line in (project.run_dir / "journal.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "checkpoint_suspect" and e["step"] == 10 for e in journal)

    verify = subprocess.run([RUNBOOK, "verify", str(project.config)], capture_output=True, text=True, cwd=project.root,
                            env={**os.environ, "PYTHONPATH": str(REPO)})   # the toy adapter is imported from tests/
    assert f"suspect, in the quarantine: {moved.name}: the divergence began at step 11" in verify.stdout, verify.stdout
