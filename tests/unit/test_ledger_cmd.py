"""`runbook ledger`: the team's failure table over several run folders, from records the engine's own
store writes (the figures are the subject here; tests/language/test_draft_playbook.py runs it on real runs)."""

from __future__ import annotations

import pytest

import json
import os
import subprocess
from pathlib import Path

from engine.records.incident import Incident
from engine.records.incident_store import IncidentStore
from engine.records.signature import signature_of
from tests.conftest import RUNBOOK

CRASH_TAIL = ["Traceback (most recent call last):", '  File "t.py", line 1, in <module>',
              "ShardHeaderCorrupted: shard 0x{addr:x} index {n} in /tmp/s{n}/x.bin has a bad header after step {n}"]


def record(number: int, playbook: str, outcome: str, tail: list[str], *, exit_code: int | None = 1, step=20,
           resumed=None, recovery=None, tokens_per_sec=1000.0, device="cpu", devices=1, launch=1, detected=1000.0) -> Incident:
    snapshot = {"time": detected, "trainer": {"alive": exit_code is None, "exit_code": exit_code, "launches": launch,
                                              "signal": "SIGTERM" if exit_code == -15 else None},
                "metrics": {"step": step, "tokens_per_sec": tokens_per_sec}, "tail": tail}
    steps_lost = None if resumed is None else step - resumed
    return Incident(schema_version=3, id=f"incident-{number}", playbook=playbook, outcome=outcome, detected_at=detected,
                    opened_at=detected, step_at_failure=step, resumed_step=resumed, steps_lost=steps_lost,
                    tokens_lost=None if steps_lost is None else steps_lost * 1024, recovery_seconds=recovery,
                    snapshot=snapshot, signature=signature_of(snapshot),
                    config_before={"trainer": {"device": device, "devices": devices}})


def write_run(run_dir: Path, incidents: list[Incident], exits: dict[int, float] | None = None) -> None:
    store = IncidentStore(run_dir)
    store.dir.mkdir(parents=True)
    for incident in incidents:
        store.write(incident)
    for launch, ended in (exits or {}).items():
        folder = run_dir / "launches" / f"launch-{launch:03d}"
        folder.mkdir(parents=True)
        (folder / "exit-status.json").write_text(json.dumps({"exit_code": 1, "ended": ended}))


def ledger(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([RUNBOOK, "ledger", *args], capture_output=True, text=True, timeout=60, cwd=cwd)


@pytest.mark.slow
def test_ledger_per_class_and_signature_across_runs(tmp_path):
    shard = lambda n: [line.format(addr=0x7f00 + n, n=n) for line in CRASH_TAIL]   # noqa: E731 - one failure, values differ
    write_run(tmp_path / "team" / "alice" / "runs" / "pretrain", [
        record(1, "preemption", "recovered", ["Epoch 1 | iter 40 step 20"], exit_code=-15, step=20, resumed=10, recovery=12.0),
        record(2, "unknown-crash", "escalated", shard(3), step=31, detected=1003.5, launch=2),
    ], exits={2: 1000.0})
    write_run(tmp_path / "team" / "bob" / "runs" / "pretrain", [
        record(3, "shard-header-corrupted", "recovered", shard(8), step=12, resumed=10, recovery=30.0, device="cuda",
               devices=8, tokens_per_sec=2048.0, detected=2001.0, launch=1),
        record(4, "shard-header-corrupted", "recovered", shard(9), step=25, resumed=20, recovery=20.0, device="cuda",
               devices=8, tokens_per_sec=2048.0, detected=3000.0, launch=3),
    ], exits={1: 2000.0, 3: 2999.0})

    done = ledger("team", "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "out" / "ledger.json").read_text())
    assert sorted(data["runs"]) == ["team/alice/runs/pretrain", "team/bob/runs/pretrain"]
    by_class = {r["key"]: r for r in data["by_class"]}
    shard_class = by_class["shard-header-corrupted"]
    assert shard_class["count"] == 2 and shard_class["escalations"] == 0
    assert (shard_class["recovery_mean_s"], shard_class["recovery_worst_s"]) == (25.0, 30.0)
    assert (shard_class["detection_mean_s"], shard_class["detection_worst_s"]) == (1.0, 1.0)
    assert shard_class["steps_lost"] == 7 and shard_class["tokens_lost"] == 7 * 1024
    # 8 GPUs x (30 s + 20 s of recovery + 7168 tokens / 2048 tok/s)
    assert abs(shard_class["gpu_hours"] - 8 * (50 + 7168 / 2048) / 3600) < 1e-3 and shard_class["cpu_hours"] == 0
    assert by_class["unknown-crash"]["escalations"] == 1 and by_class["unknown-crash"]["handled_by"] == []
    assert by_class["unknown-crash"]["detection_worst_s"] == 3.5
    # One signature for the escalated incident and the two recovered ones: the same failure, three times.
    [sig] = [r for r in data["by_signature"] if r["count"] == 3]
    assert sig["escalations"] == 1 and sig["handled_by"] == ["shard-header-corrupted"]
    assert "ShardHeaderCorrupted: shard <hex>" in sig["label"]
    markdown = (tmp_path / "out" / "ledger.md").read_text()
    assert "## By failure class" in markdown and "## By signature" in markdown and markdown in done.stdout
    assert "| unknown-crash | 1 | 1 |" in markdown
    assert (tmp_path / "out" / "ledger.png").stat().st_size > 1000


@pytest.mark.slow
def test_ledger_leaves_out_hostile_records_with_a_sentence(tmp_path):
    run = tmp_path / "run"
    write_run(run, [record(1, "preemption", "recovered", ["x"], exit_code=-15, resumed=10, recovery=5.0)])
    os.mkfifo(run / "incidents" / "incident-2.json")                        # a plain read would block forever
    (run / "incidents" / "incident-3.json").write_text('{"id": "incident-3", "steps_lost": 1e308}')
    with open(run / "incidents" / "incident-4.json", "wb") as fh:              # bigger than any record
        fh.truncate(5 * 1024 * 1024)
    (run / "incidents" / "incident-5.json").write_text("[" * 100_000)
    done = ledger(str(run), "-o", str(tmp_path / "out"), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [r["key"] for r in data["by_class"]] == ["preemption"]
    assert len(data["left_out"]) == 4
    assert "incident-2.json is not a regular file" in done.stderr and "more than a record may have" in done.stderr


def test_ledger_without_a_run_folder_says_so(tmp_path):
    (tmp_path / "empty").mkdir()
    done = ledger(str(tmp_path / "empty"), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 9 and "no run folder (one with incidents/)" in done.stderr
