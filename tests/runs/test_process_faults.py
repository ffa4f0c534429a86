"""Process-level failures on real tiny litgpt runs, broken from outside: OOM, disk full, corrupt
checkpoints, a hang, and a resume across a micro-batch change."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from engine.checkpoints.store import MANIFEST_NAME, list_checkpoints, verify_checkpoint
from engine.trainers.litgpt.layout import LitGPTLayout
from engine.records.journal import Journal
from tests.conftest import require_capability, stop_process, wait_for


# Transitional: these tests still run the real litgpt trainer (tests/conftest.py's `project` is the toy's).
@pytest.fixture
def project(litgpt_project):
    return litgpt_project


@pytest.fixture
def reference_run(litgpt_reference_run):
    return litgpt_reference_run



def finish(watcher, project, timeout=300) -> int:
    try:
        return watcher.wait(timeout=timeout)
    finally:
        stop_process(watcher)


def test_oom_drill_halves_micro_batch_until_it_fits_and_keeps_the_token_budget(project):
    # The seed's drill: a micro-batch far too large under a memory limit on the trainer.
    # Measured on this machine's kind: at 1300 MB of address space micro-batch 512 and 256 fail, 128 fits.
    project.set(micro_batch_size=512, batch_size=512, max_tokens=65536, save_interval=1,
                trainer={"memory_limit_mb": 1300, "device": "cpu"})
    code = finish(project.watch(), project)
    assert code == 0, project.watch_output()

    incidents = project.incidents()
    assert incidents and all(i["playbook"] == "oom" for i in incidents), [i["playbook"] for i in incidents]
    # Each OOM halved the micro-batch once, starting from 512 (256 sometimes fits at this limit, 128 always).
    chain = [i["config_changes"]["micro_batch_size"] for i in incidents]
    assert chain[0] == [512, 256] and all(new == old // 2 for old, new in chain)
    assert all(a[1] == b[0] for a, b in zip(chain, chain[1:]))
    final_mb = chain[-1][1]
    assert f"micro_batch_size: {final_mb}" in project.config.read_text()
    assert "# sequences per forward/backward pass" in project.config.read_text()  # comments kept
    assert "batch_size: 512" in project.config.read_text()
    # Same optimizer steps and tokens as an undisturbed run at the final micro-batch:
    # 65536 tokens / (512 x 64) = 2 steps; iter_num counts micro-batches of the final size.
    progress = project.final_progress()
    assert progress["step_count"] == 2
    assert progress["iter_num"] * final_mb * 64 == 65536
    # No corrupt checkpoint left behind.
    for ckpt in list_checkpoints(project.out_dir, LitGPTLayout()):
        assert verify_checkpoint(ckpt).ok, ckpt
    # One launch copy of the config per launch, showing the hyperparameters each ran with.
    launches = sorted((project.run_dir / "launches").iterdir())
    sizes = [512] + [new for _, new in chain]
    assert len(launches) == len(sizes)
    assert all(f"micro_batch_size: {mb}" in (launch / "run_config.yaml").read_text() for launch, mb in zip(launches, sizes))


def test_micro_batch_change_on_resume_keeps_steps_tokens_and_schedule_exact(project, reference_run, tmp_path):
    # A playbook that halves micro_batch_size on preemption: the resume must rescale iter_num.
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "halve_on_preemption.yaml").write_text("""
name: halve-on-preemption
description: test playbook
match: {exit: {signals: [SIGTERM], codes: [75]}}   # 75: the trainer saved on the notice and exited
actions:
  - set_hyperparameters: {micro_batch_size: "{{ config.micro_batch_size // 2 }}"}
  - resume: {from: newest_verified}
""")
    project.set(playbooks={"paths": [str(playbooks)], "shipped": False})
    watcher = project.watch()
    wait_for(lambda: (project.step_dir(20) / "model_config.yaml").exists(), 240, what="checkpoint 20")
    os.kill(project.trainer_pid(), signal.SIGTERM)
    assert finish(watcher, project) == 0, project.watch_output()

    ref = reference_run["progress"]
    got = project.final_progress()
    assert got["step_count"] == ref["step_count"]
    assert got["iter_num"] * 2 * 64 == ref["iter_num"] * 4 * 64  # same tokens with micro-batch 2
    incident = project.incidents()[0]
    assert any("iter_num" in note and "-> " in note for note in incident["notes"])
    # The original checkpoint was not modified: it still verifies against its manifest.
    source = Path(incident["resumed_from"])
    assert verify_checkpoint(next(c for c in list_checkpoints(project.out_dir, LitGPTLayout()) if c.path == source.parent)).ok


def test_truncated_and_bit_flipped_checkpoints_are_quarantined_and_the_newest_good_one_resumed(project, reference_run):
    watcher = project.watch()
    wait_for(lambda: (project.step_dir(30) / "model_config.yaml").exists(), 240, what="checkpoint 30")
    os.kill(project.trainer_pid(), signal.SIGSTOP)  # hold the trainer still while we damage its files
    wait_for(lambda: (project.step_dir(10) / MANIFEST_NAME).exists(), 30, what="step 10 sealed")
    sealed_at = (project.step_dir(10) / MANIFEST_NAME).stat().st_mtime_ns
    newest, other = project.step_dir(30) / "lit_model.pth", project.step_dir(20) / "lit_model.pth"
    size = newest.stat().st_size
    with open(newest, "r+b") as fh:
        fh.truncate(size // 2)
    with open(other, "r+b") as fh:
        fh.seek(other.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    os.kill(project.trainer_pid(), signal.SIGKILL)
    assert finish(watcher, project) == 0, project.watch_output()

    quarantine = project.run_dir / "quarantine"
    names = sorted(p.name.split("-2")[0][:13] for p in quarantine.iterdir())
    assert "step-00000020" in names and "step-00000030" in names
    assert not any(p.is_relative_to(project.out_dir) for p in quarantine.rglob("*"))
    resumed = [i for i in project.incidents() if i.get("resumed_step") is not None]
    assert resumed and resumed[0]["resumed_step"] == 10
    project.assert_same_result_as(reference_run)   # counters and bit-identical weights
    # One full verification per incident (verify_checkpoints; resume does not read everything again),
    # and a sealed checkpoint is checked against its manifest, never re-sealed.
    entries = Journal(project.run_dir / "journal.jsonl").entries()
    opened = next(i for i, e in enumerate(entries) if e["kind"] == "incident_opened")
    closed = next(i for i, e in enumerate(entries) if e["kind"] == "incident_closed" and i > opened)
    forced = [e for e in entries[opened:closed] if e["kind"] == "verified" and e["forced"]]
    assert len(forced) == 1, forced
    assert 10 in forced[0]["rechecked"] and 10 not in forced[0]["sealed"]
    assert (project.step_dir(10) / MANIFEST_NAME).stat().st_mtime_ns == sealed_at


def test_sigstop_hang_is_detected_within_timeout_and_resumed_with_nccl_debug(project, reference_run):
    project.set(watch={"hang_floor_s": 5.0, "hang_timeout_s": 60})
    watcher = project.watch()
    wait_for(lambda: (project.step_dir(10) / "model_config.yaml").exists(), 240, what="checkpoint 10")
    import time

    os.kill(project.trainer_pid(), signal.SIGSTOP)
    stopped_at = time.time()
    assert finish(watcher, project) == 0, project.watch_output()

    incident = next(i for i in project.incidents() if i["playbook"] == "hang")
    timeout = incident["snapshot"]["hang_timeout_s"]
    assert incident["detected_at"] - stopped_at <= timeout + 1.5, (incident["detected_at"] - stopped_at, timeout)
    assert incident["snapshot"]["trainer"]["stopped"] is True
    journal = (project.run_dir / "journal.jsonl").read_text()
    assert '"NCCL_DEBUG": "INFO"' in journal and '"TORCH_DISTRIBUTED_DEBUG": "DETAIL"' in journal
    project.assert_same_result_as(reference_run)   # counters and bit-identical weights


def best_val_step(project) -> int:
    """The optimizer step with the lowest val loss, read from the trainer's own log lines."""
    import re

    best = None
    for log in sorted((project.run_dir / "logs").glob("trainer-*.log")):
        for m in re.finditer(r"^iter (\d+): val loss (\S+),", log.read_text(), re.M):
            step, loss = int(m.group(1)) // 4, float(m.group(2))  # 4 micro-batches per step
            if best is None or loss < best[1]:
                best = (step, loss)
    return best[0]


def _can_mount_tmpfs(where: Path) -> str | None:
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        return f"mount refused: {done.stderr.strip()}"
    subprocess.run(["umount", str(where)], check=True)
    return None


@pytest.mark.parametrize("retention", ["as each save is sealed", "off: the disk-low playbook alone"])
def test_disk_full_is_prevented_by_pruning_and_the_run_finishes_with_best_plus_newest(project, tmp_path, retention):
    mount_point = project.out_dir
    reason = _can_mount_tmpfs(mount_point)
    if reason:
        require_capability(reason)
    # Each checkpoint is ~2 MB: 4 step checkpoints + final need ~10 MB; 9 MB only suffices with pruning.
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=9m", "tmpfs", str(mount_point)], check=True)
    try:
        project.set(keep_last_k=1)
        if retention.startswith("off"):
            project.set(upkeep={"retention_interval_s": None})
        code = finish(project.watch(), project)
        assert code == 0, project.watch_output()
        kept = [c.step for c in list_checkpoints(project.out_dir, LitGPTLayout())]
        incidents = project.incidents()
        assert (project.out_dir / "final" / "lit_model.pth").exists()
        assert kept == sorted({best_val_step(project), 40}), kept
        entries = Journal(project.run_dir / "journal.jsonl").entries()
        last_exit = max(i for i, e in enumerate(entries) if e.get("kind") == "trainer_exited")
        training = entries[:last_exit]   # the completion's own retention comes after the trainer's exit
        pruned_while_training = [e for e in training if e.get("kind") == "retention"
                                 and "deleted 0 checkpoint" not in e.get("summary", "")]
        if retention.startswith("off"):
            assert not pruned_while_training, pruned_while_training
            assert any(i["playbook"] in ("disk-low", "disk-full") for i in incidents)
            assert sum(i.get("freed_bytes", 0) for i in incidents) > 0
        else:   # retention kept the disk from filling: no save failed, no playbook had anything to do
            assert pruned_while_training
            assert not [i for i in incidents if i["playbook"] in ("disk-low", "disk-full")], incidents
    finally:
        subprocess.run(["umount", "-l", str(mount_point)])
