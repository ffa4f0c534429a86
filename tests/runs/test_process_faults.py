"""Process-level failures on real toy-trainer runs, broken from outside: a hang (SIGSTOP) and a disk
that fills up (a real tmpfs out_dir). Faults whose recovery proves something about litgpt itself (a
real memory limit, a micro-batch change on resume, truncated and bit-flipped lit_model.pth files) are
in tests/litgpt/test_litgpt_faults.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from engine.checkpoints.store import list_checkpoints
from engine.records.journal import Journal
from tests.conftest import REPO, can_mount_tmpfs, require_capability, run_watch, stop_process, wait_for
from tests.toy_trainer.adapter import ToyLayout


def finish(watcher, timeout=120) -> int:
    try:
        return watcher.wait(timeout=timeout)
    finally:
        stop_process(watcher)


def toy_extra(project, **extra) -> None:
    """Set the toy's trainer.extra options (the section is replaced as a whole: notice_save is kept on)."""
    project.set(trainer={"extra": {"step_seconds": 0.03, "notice_save": True, **extra}})


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_sigstop_hang_is_detected_within_timeout_and_resumed_with_nccl_debug(project, reference_run):
    # 0.1 s a step: the run is still training when the test stops it after checkpoint 10 (3 s to spare).
    env_file = project.root / "launch-env.jsonl"
    toy_extra(project, step_seconds=0.1, env_file=str(env_file))
    project.set(watch={"hang_floor_s": 5.0, "hang_timeout_s": 60})
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        wait_for(lambda: project.saved(10), 60, what="checkpoint 10")
        os.kill(project.trainer_pid(), signal.SIGSTOP)
        stopped_at = time.time()
        assert watcher.wait(timeout=120) == 0, project.watch_output()
    finally:
        stop_process(watcher)

    incident = next(i for i in project.incidents() if i["playbook"] == "hang")
    timeout = incident["snapshot"]["hang_timeout_s"]
    assert incident["detected_at"] - stopped_at <= timeout + 1.5, (incident["detected_at"] - stopped_at, timeout)
    assert incident["snapshot"]["trainer"]["stopped"] is True
    journal = (project.run_dir / "journal.jsonl").read_text()
    # the diagnosis, for the relaunch only; DETAIL lowered to INFO on a CPU (it kills gloo ranks at start-up)
    assert '"NCCL_DEBUG": "INFO"' in journal and '"TORCH_DISTRIBUTED_DEBUG": "INFO"' in journal
    assert '"diagnostic": true' in journal and '"TORCH_DISTRIBUTED_DEBUG": "DETAIL"' not in journal
    # What the trainer itself was given: the first launch ran without the debug variables, the relaunch with them.
    launches = [json.loads(line) for line in env_file.read_text().splitlines()]
    assert len(launches) >= 2 and "NCCL_DEBUG" not in launches[0], [sorted(e) for e in launches]
    assert launches[-1].get("NCCL_DEBUG") == "INFO" and launches[-1].get("TORCH_DISTRIBUTED_DEBUG") == "INFO"
    project.assert_same_result_as(reference_run)   # the step count and bit-identical final weights


def best_val_step(project) -> int:
    """The step with the lowest val loss, read from the toy's own `toy val step N val_loss L` lines."""
    best = None
    for log in sorted((project.run_dir / "logs").glob("trainer-*.log")):
        for m in re.finditer(r"^toy val step (\d+) val_loss (\S+)$", log.read_text(), re.M):
            step, loss = int(m.group(1)), float(m.group(2))
            if best is None or loss < best[1]:
                best = (step, loss)
    assert best is not None, "the toy printed no validation loss"
    return best[0]


# The toy's files are a few hundred bytes: on a tmpfs each takes one 4 KiB page. A step checkpoint is 3 pages
# (state.json, state.sha256, runbook's manifest), final/ 2, runbook-owner.json 1. 40 steps saved every 5 are 8
# checkpoints + final = 27 pages; 16 pages (64 KiB) hold the owner file and 5 checkpoints, so the run cannot
# finish unless checkpoints are deleted, and kept to keep_last_k 1 + the best + one being written (10 pages)
# it has 2 checkpoints' worth to spare for a watcher that prunes late.
TMPFS_SIZE, STEPS, SAVE_INTERVAL = "64k", 40, 5


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
@pytest.mark.parametrize("retention", ["as each save is sealed", "off: the disk-low playbook alone"])
def test_disk_full_is_prevented_by_pruning_and_the_run_finishes_with_best_plus_newest(project, retention):
    mount_point = project.out_dir
    reason = can_mount_tmpfs(mount_point)
    if reason:
        require_capability(reason)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mount_point)], check=True)
    try:
        # lr 0.5 and a validation at every save: the toy's loss reaches its floor within a few steps, then
        # its per-step wobble decides which validation is the lowest (an earlier one than the newest).
        toy_extra(project, step_seconds=0.1, validate_interval=SAVE_INTERVAL)
        project.set(keep_last_k=1, lr=0.5, save_interval=SAVE_INTERVAL)
        if retention.startswith("off"):
            project.set(upkeep={"retention_interval_s": None})
        run_watch(project)
        kept = [c.step for c in list_checkpoints(project.out_dir, ToyLayout())]
        incidents = project.incidents()
        assert project.final_state()["step"] == STEPS
        assert kept == sorted({best_val_step(project), STEPS}), kept
        entries = Journal(project.run_dir / "journal.jsonl").entries()
        last_exit = max(i for i, e in enumerate(entries) if e.get("kind") == "trainer_exited")
        training = entries[:last_exit]   # the completion's own retention comes after the trainer's exit
        pruned_while_training = [e for e in training if e.get("kind") == "retention"
                                 and "deleted 0 checkpoint" not in e.get("summary", "")]
        if retention.startswith("off"):
            assert not pruned_while_training, pruned_while_training
            assert any(i["playbook"] in ("disk-low", "disk-full") for i in incidents), incidents
            assert sum(i.get("freed_bytes", 0) for i in incidents) > 0
        else:   # retention kept the disk from filling: no save failed, no playbook had anything to do
            assert pruned_while_training
            assert not [i for i in incidents if i["playbook"] in ("disk-low", "disk-full")], incidents
    finally:
        subprocess.run(["umount", "-l", str(mount_point)])
