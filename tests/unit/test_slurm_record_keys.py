"""A SLURM allocation record written before issue 46 named what scontrol/sacct said `evidence`: it still reads,
and a new record writes `scheduler_said` (the real record files, engine/cluster/slurm_records.py)."""

from __future__ import annotations

import json

from engine.cluster.slurm_records import Allocation, allocation_path, read_allocations, write_allocation


def test_an_old_allocation_record_still_reads_what_the_scheduler_said(tmp_path):
    old = {"schema_version": 1, "job_id": "7", "restart": 0, "node": "n1", "started_at": 1.0, "watcher_pid": 42,
           "ended": "node failure", "evidence": "sacct: NODE_FAIL"}
    path = allocation_path(tmp_path, "7", 0)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(old))
    [read], problems = read_allocations(tmp_path)
    assert problems == [] and read.scheduler_said == "sacct: NODE_FAIL"
    write_allocation(tmp_path, Allocation(**{**read.model_dump(), "scheduler_said": "sacct: PREEMPTED"}))
    written = json.loads(path.read_text())
    assert written["scheduler_said"] == "sacct: PREEMPTED" and "evidence" not in written
