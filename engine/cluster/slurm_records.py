"""What the run folder keeps about SLURM: the submission and every allocation the run used.

    run_dir/slurm/
      job.sbatch                       the script `runbook slurm submit` wrote
      submission.json                  job id, when, sbatch's argv (Submission)
      job-<id>.out                     the job's output, all allocations appended
      allocation-<id>-<restart>.json   one per allocation (Allocation), written by the watcher in it

An allocation record is written when the watcher starts in it and rewritten when it ends. One that
never got its end (the node died, SIGKILL) is closed by the next allocation's watcher, which says so.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from engine.core.bounded_read import MAX_RECORD_BYTES, read_text_file
from engine.core.durable import atomic_write_text
from engine.core.run_folder import RunFolder

SCHEMA_VERSION = 1
_ALLOCATION_FILE = re.compile(r"^allocation-(\d+)-(\d+)\.json$")


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEMA_VERSION


class Submission(Record):
    job_id: str
    submitted_at: float
    script: str
    argv: list[str]


class Allocation(Record):
    job_id: str
    restart: int = Field(ge=0)          # SLURM_RESTART_COUNT: 0 for the first allocation of the job
    node: str
    started_at: float
    watcher_pid: int
    ended_at: float | None = None
    ended: str | None = None            # how: completed, escalated, requeued after a time-limit notice, ...
    notice_cause: Literal["time-limit", "preemption", "cancelled", "requeued", "signal", "unknown"] | None = None
    # What scontrol/sacct said; `evidence` in records before, still read.
    scheduler_said: str | None = Field(None, validation_alias=AliasChoices("scheduler_said", "evidence"))
    requeued: bool = False


def slurm_dir(run_dir: Path) -> Path:
    return RunFolder(run_dir).slurm


def allocation_path(run_dir: Path, job_id: str, restart: int) -> Path:
    return slurm_dir(run_dir) / f"allocation-{job_id}-{restart}.json"


def write_allocation(run_dir: Path, allocation: Allocation) -> None:
    path = allocation_path(run_dir, allocation.job_id, allocation.restart)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, allocation.model_dump_json(indent=1) + "\n")


def write_submission(run_dir: Path, submission: Submission) -> None:
    slurm_dir(run_dir).mkdir(parents=True, exist_ok=True)
    atomic_write_text(slurm_dir(run_dir) / "submission.json", submission.model_dump_json(indent=1) + "\n")


def read_submission(run_dir: Path) -> Submission | None:
    try:
        return Submission.model_validate_json(read_text_file(slurm_dir(run_dir) / "submission.json", MAX_RECORD_BYTES))
    except (OSError, ValidationError, ValueError):
        return None


def read_allocations(run_dir: Path) -> tuple[list[Allocation], list[str]]:
    """Every allocation record, oldest first, and one sentence per file that could not be read."""
    allocations, problems = [], []
    folder = slurm_dir(run_dir)
    if not folder.is_dir():
        return [], []
    for path in folder.iterdir():
        if not _ALLOCATION_FILE.match(path.name):
            continue
        try:
            allocations.append(Allocation.model_validate_json(read_text_file(path, MAX_RECORD_BYTES)))   # a FIFO or /dev/zero: one sentence
        except (OSError, ValidationError, ValueError) as error:
            problems.append(f"{path}: not an allocation record ({str(error).splitlines()[0][:200]})")
    allocations.sort(key=lambda a: (a.started_at, int(a.job_id) if a.job_id.isdigit() else 0, a.restart))
    return allocations, problems


def recorded_job_ids(run_dir: Path) -> list[str]:
    """The job ids the run folder names, newest first: the last submission's, then those of allocations
    (a job submitted by hand with job.sbatch has only these)."""
    submission = read_submission(run_dir)
    allocations, _ = read_allocations(run_dir)
    ids = ([submission.job_id] if submission else []) + [a.job_id for a in reversed(allocations)]
    return list(dict.fromkeys(ids))
