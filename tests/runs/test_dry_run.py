"""`runbook watch --dry-run`: the same matching and planning, nothing signalled or written."""

from __future__ import annotations

import hashlib
import json
import subprocess

from tests.conftest import RUNBOOK
import pytest


# Transitional: these tests still run the real litgpt trainer (tests/conftest.py's `project` is the toy's).
@pytest.fixture
def project(litgpt_project):
    return litgpt_project


OOM_TAIL = """Epoch 1 | iter 4 step 1 | loss train: 6.422, val: n/a | iter time: 20.00 ms (step) remaining time: 0:00:09
Traceback (most recent call last):
RuntimeError: [enforce fail at alloc_cpu.cpp:127] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate 134217728 bytes. Error code 12 (Cannot allocate memory)
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
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "DRY-RUN oom would fire" in result.stdout
    assert "micro_batch_size=2" in result.stdout          # the computed value, from the same planner
    assert tree_digest(project.root) == before           # no file written, renamed or removed
