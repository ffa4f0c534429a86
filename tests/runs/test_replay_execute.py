"""`runbook replay incident-N --execute` end to end.

A real preemption of a real run (the toy trainer, tests/conftest.py's `project`) makes a real incident
record; the replay then performs that recovery again from the recorded checkpoint in a new run folder
and must end exactly where an undisturbed run ends (the toy's final state, bit for bit), while the
original run's files stay byte-identical. A replay of a litgpt run links the run's tokenized data
instead of making it again (checked on the real litgpt adapter, without training).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, RUNBOOK, stop_process, wait_for

ENV = {"PYTHONPATH": str(REPO)}   # the watcher (and the replay's in-process watch) imports tests.toy_trainer


def digest(*roots) -> str:
    h = hashlib.sha256()
    for root in roots:
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
        for path in paths:
            h.update(str(path).encode() + path.read_bytes())
    return h.hexdigest()


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_execute_performs_the_recovery_again_in_a_new_run_folder(project, reference_run):
    project.set(trainer={"extra": {"step_seconds": 0.2, "notice_save": True}})   # 20 steps (4 s) after checkpoint 20
    watcher = project.watch(env=ENV)
    try:
        wait_for(lambda: project.saved(20), 120, what="second checkpoint")
        os.kill(project.trainer_pid(), signal.SIGTERM)
        assert watcher.wait(timeout=120) == 0, project.watch_output()
    finally:
        stop_process(watcher)
    # Other playbooks (e.g. slow-training on a busy machine) may add incidents: pick the preemption.
    incident = next(i for i in project.incidents() if i["playbook"] == "preemption")
    assert incident["trainer_exit_code"] == 75 and 20 <= incident["resumed_step"] < 40, incident   # its notice save
    original = (project.run_dir, project.out_dir, project.config, project.run_log)
    before = digest(*original)

    def replay(*args):
        return subprocess.run([RUNBOOK, "replay", incident["id"], "--config", str(project.config), *args],
                              cwd=project.root, capture_output=True, text=True, timeout=300, env={**os.environ, **ENV})

    dry = replay()
    assert dry.returncode == 0 and "unchanged" in dry.stdout, dry.stdout + dry.stderr
    assert not list((project.root / "runs").glob("replay-*"))  # a dry run creates nothing

    done = replay("--execute")
    assert done.returncode == 0, done.stdout + done.stderr
    [folder] = list((project.root / "runs").glob(f"replay-{incident['id']}-*"))
    origin = json.loads((folder / "replay-origin.json").read_text())
    assert origin["incident"] == incident["id"] and origin["step"] == incident["resumed_step"]
    launches = [e for e in map(json.loads, (folder / "run" / "journal.jsonl").read_text().splitlines())
                if e["kind"] == "launch"]
    copy = folder / "checkpoints" / project.layout.folder_name(incident["resumed_step"])
    assert [e["resume_from"] for e in launches] == [str(project.layout.resume_file(copy))]   # resumed, not from scratch

    final = folder / "checkpoints" / "final" / "state.json"
    assert json.loads(final.read_text())["step"] == reference_run["progress"]["step_count"]
    assert hashlib.sha256(final.read_bytes()).hexdigest() == reference_run["weights"]   # bit-identical
    assert digest(*original) == before  # the original run is untouched


def test_a_replay_of_a_litgpt_run_links_the_runs_tokenized_data(tmp_path):
    """litgpt's tokenized data cache (run_dir/data/<key>/): the replay folder's run gets the run's complete
    caches as hard links, never a second tokenization (engine/trainers/litgpt/data_cache.py). The caches
    here are laid out as litgpt's are; their bytes are not read."""
    import shutil

    from engine.trainers.run_config import load_config
    from runbook.commands.replay_execute import prepare_replay_run

    root = tmp_path / "project"
    (root / "configs").mkdir(parents=True)
    shutil.copy(REPO / "configs" / "run_config.yaml", root / "configs" / "run_config.yaml")   # trainer.kind: litgpt
    loaded = load_config(root / "configs" / "run_config.yaml")
    assert loaded.config.trainer.kind == "litgpt"
    for split in ("train", "val"):
        (loaded.run_dir / "data" / "key-a" / split / split).mkdir(parents=True)
        (loaded.run_dir / "data" / "key-a" / split / split / "index.json").write_text(f'{{"{split}": 1}}')
    record = {"id": "incident-1", "playbook": "preemption", "resumed_step": 0, "config_after": {}}
    config = prepare_replay_run(record, loaded, loaded.playbook_paths)
    caches = list((config.parent.parent / "run" / "data").glob("*"))
    assert [c.name for c in caches] == ["key-a"], caches
    index = Path("train") / "train" / "index.json"
    assert (caches[0] / index).stat().st_ino == (loaded.run_dir / "data" / "key-a" / index).stat().st_ino
