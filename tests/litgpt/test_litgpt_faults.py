"""Faults whose recovery proves something about litgpt itself, on real tiny litgpt runs broken from outside:
a real memory limit (litgpt's OOM at a micro-batch too large, halved until it fits), a resume across a
micro-batch change (litgpt's iter_num counts micro-batches: it is rescaled), truncated and bit-flipped
lit_model.pth files (found by the zip CRC scan, the resumed run bit-identical to an undisturbed one) and
corrupt lines in the training text (litgpt's tokenization cannot read them). The same scenarios on the
toy trainer, which prove the engine rather than litgpt, are in tests/runs/."""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from engine.checkpoints.manifest import verify_checkpoint
from engine.checkpoints.store import MANIFEST_NAME, list_checkpoints
from engine.records.journal import Journal
from engine.trainers.litgpt.layout import LitGPTLayout
from tests.conftest import RUNBOOK, stop_process, wait_for


def finish(watcher, timeout: float = 600) -> int:
    try:
        return watcher.wait(timeout=timeout)
    finally:
        stop_process(watcher)


def final_val_loss(project) -> float:
    logs = sorted((project.run_dir / "logs").glob("trainer-*.log"))
    found = re.findall(r"Final evaluation \| val loss: (\S+) \|", logs[-1].read_text())
    assert found, f"no final evaluation in {logs[-1]}"
    return float(found[-1])


def test_oom_drill_halves_micro_batch_until_it_fits_and_keeps_the_token_budget(litgpt_project):
    project = litgpt_project
    # The seed's drill: a micro-batch far too large under a memory limit on the trainer.
    # Measured on this machine's kind: at 1300 MB of address space micro-batch 512 and 256 fail, 128 fits.
    project.set(micro_batch_size=512, batch_size=512, max_tokens=65536, save_interval=1,
                trainer={"memory_limit_mb": 1300, "device": "cpu"})
    code = finish(project.watch())
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


def test_micro_batch_change_on_resume_keeps_steps_tokens_and_schedule_exact(litgpt_project, litgpt_reference_run, tmp_path):
    project = litgpt_project
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
    wait_for(lambda: project.saved(20), 240, what="checkpoint 20")
    os.kill(project.trainer_pid(), signal.SIGTERM)
    assert finish(watcher) == 0, project.watch_output()

    ref = litgpt_reference_run["progress"]
    got = project.final_progress()
    assert got["step_count"] == ref["step_count"]
    assert got["iter_num"] * 2 * 64 == ref["iter_num"] * 4 * 64  # same tokens with micro-batch 2
    incident = project.incidents()[0]
    assert any("iter_num" in note and "-> " in note for note in incident["notes"])
    # The original checkpoint was not modified: it still verifies against its manifest.
    source = Path(incident["resumed_from"])
    assert verify_checkpoint(next(c for c in list_checkpoints(project.out_dir, LitGPTLayout()) if c.path == source.parent)).ok


def test_truncated_and_bit_flipped_checkpoints_are_quarantined_and_the_newest_good_one_resumed(litgpt_project, litgpt_reference_run):
    project = litgpt_project
    watcher = project.watch()
    wait_for(lambda: project.saved(30), 240, what="checkpoint 30")
    os.kill(project.trainer_pid(), signal.SIGSTOP)  # hold the trainer still while we damage its files
    wait_for(lambda: (project.step_dir(10) / MANIFEST_NAME).exists(), 30, what="step 10 sealed")
    sealed_at = (project.step_dir(10) / MANIFEST_NAME).stat().st_mtime_ns
    newest, other = project.step_dir(30) / "lit_model.pth", project.step_dir(20) / "lit_model.pth"
    size = newest.stat().st_size
    with open(newest, "r+b") as fh:
        fh.truncate(size // 2)
    with open(other, "r+b") as fh:   # one byte inside a tensor's data: only the zip CRC scan sees it
        fh.seek(other.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    os.kill(project.trainer_pid(), signal.SIGKILL)
    assert finish(watcher) == 0, project.watch_output()

    quarantine = project.run_dir / "quarantine"
    names = sorted(p.name.split("-2")[0][:13] for p in quarantine.iterdir())
    assert "step-00000020" in names and "step-00000030" in names
    assert not any(p.is_relative_to(project.out_dir) for p in quarantine.rglob("*"))
    resumed = [i for i in project.incidents() if i.get("resumed_step") is not None]
    assert resumed and resumed[0]["resumed_step"] == 10
    project.assert_same_result_as(litgpt_reference_run)   # counters and bit-identical weights
    # One full verification per incident (verify_checkpoints; resume does not read everything again),
    # and a sealed checkpoint is checked against its manifest, never re-sealed.
    entries = Journal(project.run_dir / "journal.jsonl").entries()
    opened = next(i for i, e in enumerate(entries) if e["kind"] == "incident_opened")
    closed = next(i for i, e in enumerate(entries) if e["kind"] == "incident_closed" and i > opened)
    forced = [e for e in entries[opened:closed] if e["kind"] == "verified" and e["forced"]]
    assert len(forced) == 1, forced
    assert 10 in forced[0]["rechecked"] and 10 not in forced[0]["sealed"]
    assert (project.step_dir(10) / MANIFEST_NAME).stat().st_mtime_ns == sealed_at


def test_corrupt_data_lines_are_escalated_with_a_scan_and_fixed_data_trains(litgpt_project, shared_data, tmp_path):
    project = litgpt_project
    data = tmp_path / "data"
    shutil.copytree(shared_data / "stdlib", data)
    shard = data / "train" / "shard-001.txt"
    lines = shard.read_bytes().split(b"\n")
    lines[10] = b"bad \xff\xfe bytes"          # invalid UTF-8: litgpt's TextFiles cannot read the file
    lines[20] = b"control \x01 char"
    shard.write_bytes(b"\n".join(lines))
    project.set(data={"train_dir": str(data / "train"), "val_dir": str(data / "val"), "make_default": False},
                max_tokens=10 * 16 * 64, save_interval=5)   # 10 steps: the fixed data trains to the end

    assert finish(project.watch()) == 4, project.watch_output()   # escalated: a human must decide
    incident = next(i for i in project.incidents() if i["playbook"] == "bad-data")
    assert incident["outcome"] == "escalated"
    assert "bad line" in incident["data_scan"]["summary"]
    found = {(f["file"].split("/")[-1], f["line"], f["kind"]) for f in incident["data_scan"]["findings"]}
    assert ("shard-001.txt", 11, "invalid_utf8") in found and ("shard-001.txt", 21, "control_char") in found

    fixed = subprocess.run([RUNBOOK, "scan-data", "--config", str(project.config), "--fix"],
                           capture_output=True, text=True, timeout=120)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert shard.read_bytes().split(b"\n")[10] == b"bad \xff\xfe bytes"   # the original is kept as it was
    assert finish(project.watch()) == 0, project.watch_output()
    assert math.isfinite(final_val_loss(project))
