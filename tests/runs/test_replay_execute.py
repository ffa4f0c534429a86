"""`runbook replay incident-N --execute` end to end (slow: trains the tiny model for real, ~1 min).

A real preemption makes a real incident record; the replay then performs that recovery again from
the recorded checkpoint in a new run folder and must end exactly where an undisturbed run ends,
while the original run's files stay byte-identical.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
from pathlib import Path

from tests.conftest import RUNBOOK, stop_process, wait_for
import pytest


# Transitional: these tests still run the real litgpt trainer (tests/conftest.py's `project` is the toy's).
@pytest.fixture
def project(litgpt_project):
    return litgpt_project


@pytest.fixture
def reference_run(litgpt_reference_run):
    return litgpt_reference_run



def digest(*roots) -> str:
    h = hashlib.sha256()
    for root in roots:
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
        for path in paths:
            h.update(str(path).encode() + path.read_bytes())
    return h.hexdigest()


def test_execute_performs_the_recovery_again_in_a_new_run_folder(project, reference_run):
    watcher = project.watch()
    try:
        wait_for(lambda: (project.step_dir(20) / "model_config.yaml").exists(), 240, what="second checkpoint")
        os.kill(project.trainer_pid(), signal.SIGTERM)
        assert watcher.wait(timeout=300) == 0, project.watch_output()
    finally:
        stop_process(watcher)
    # Other playbooks (e.g. slow-training on a busy machine) may add incidents: pick the preemption.
    incident = next(i for i in project.incidents() if i["playbook"] == "preemption")
    assert incident["resumed_step"] >= 20
    original = (project.run_dir, project.out_dir, project.config, project.run_log)
    before = digest(*original)

    def replay(*args):
        return subprocess.run([RUNBOOK, "replay", incident["id"], "--config", str(project.config), *args],
                              cwd=project.root, capture_output=True, text=True, timeout=300)

    dry = replay()
    assert dry.returncode == 0 and "unchanged" in dry.stdout, dry.stdout + dry.stderr
    assert not list((project.root / "runs").glob("replay-*"))  # a dry run creates nothing

    done = replay("--execute")
    assert done.returncode == 0, done.stdout + done.stderr
    [folder] = list((project.root / "runs").glob(f"replay-{incident['id']}-*"))
    origin = json.loads((folder / "replay-origin.json").read_text())
    assert origin["incident"] == incident["id"] and origin["step"] == incident["resumed_step"]
    [cache] = list((folder / "run" / "data").iterdir())   # the run's tokenized data, linked, not made again
    index = Path("train") / "train" / "index.json"
    assert (cache / index).stat().st_ino == (project.run_dir / "data" / cache.name / index).stat().st_ino
    journal = (folder / "run" / "journal.jsonl").read_text()
    assert f"{folder}/checkpoints/step-{incident['resumed_step']:08d}/lit_model.pth" in journal  # resumed, not from scratch

    from engine.trainers.litgpt.resume import read_progress

    assert read_progress(folder / "checkpoints" / "final" / "lit_model.pth") == reference_run["progress"]
    assert digest(*original) == before  # the original run is untouched
