"""`runbook watch --dry-run`: the same matching and planning, nothing signalled or written (a toy-trainer
project whose journal says its trainer died of an OOM)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

from tests.conftest import REPO, RUNBOOK

# What the toy prints when its micro-batch does not fit (trainer.extra.oom_above_micro_batch), after a step.
OOM_TAIL = """toy step 1/40 loss 1.774459 took 30.1 ms
MemoryError: toy cannot fit micro-batch 4 (limit 2)
"""


def tree_digest(root) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def test_dry_run_prints_the_plan_for_a_dead_trainer_and_changes_nothing(project):
    project.set(micro_batch_size=4, batch_size=16, data_hash="sha256:" + "0" * 64)
    log = project.run_dir / "logs" / "trainer-001.log"
    log.parent.mkdir(parents=True)
    log.write_text(OOM_TAIL)
    entries = [
        {"time": 1.0, "kind": "launch", "launch": 1, "pid": 999999, "log": str(log), "resume_from": None, "argv": []},
        {"time": 1.1, "kind": "transition", "from": "starting", "to": "running", "reason": "launch 1"},
        {"time": 5.0, "kind": "trainer_exited", "pid": 999999, "exit_code": 1, "signal": None},
    ]
    (project.run_dir / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    before = tree_digest(project.root)

    result = subprocess.run([RUNBOOK, "watch", str(project.config), "--dry-run", "--accept-data-change"],
                            capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "DRY-RUN oom would fire" in result.stdout
    assert "micro_batch_size=2" in result.stdout          # the computed value, from the same planner
    assert tree_digest(project.root) == before           # no file written, renamed or removed
