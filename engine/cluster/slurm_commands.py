"""SLURM, the part that runs its commands: scontrol, sacct, sbatch, each bounded by a timeout, each
answering (ok, text) instead of raising: a slow or absent controller must never hang or kill the watcher."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from engine.cluster.sacct import FORMAT, AllocationEnd, by_allocation, parse_allocation_ends
from engine.cluster.slurm import JobQuery, JobView, job_view, parse_sacct, parse_show_job

MAX_OUTPUT = 64 * 1024   # a job's description is a few hundred bytes


@dataclass(frozen=True)
class Answer:
    ok: bool
    text: str    # stdout when ok, else one sentence saying what went wrong
    timed_out: bool = False


def run_command(argv: list[str], timeout_s: float, env: dict[str, str] | None = None,
                cwd: str | Path | None = None) -> Answer:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env or os.environ.copy(),
                              cwd=cwd, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return Answer(False, f"{argv[0]} is not installed (not on PATH)")
    except subprocess.TimeoutExpired:
        return Answer(False, f"`{' '.join(argv[:3])}` did not answer within {timeout_s:g} s", timed_out=True)
    except OSError as error:
        return Answer(False, f"`{argv[0]}` could not run: {error}")
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip()[-500:] or f"exit {done.returncode}"
        return Answer(False, f"`{' '.join(argv[:3])}` failed: {why}")
    return Answer(True, done.stdout[:MAX_OUTPUT])


def ask_job(job_id: str, timeout_s: float) -> tuple[JobView | None, Answer]:
    """scontrol's view of the job (None when it gave none), and its answer."""
    answer = run_command(["scontrol", "show", "job", "-o", job_id], timeout_s)
    return (job_view(parse_show_job(answer.text)) if answer.ok else None), answer


def show_job(job_id: str, timeout_s: float) -> tuple[JobView | None, str]:
    """scontrol's view of the job, and the raw answer (or why there is none) for the record."""
    view, answer = ask_job(job_id, timeout_s)
    return view, answer.text.strip() if answer.ok else answer.text


def query_jobs(job_ids: list[str], timeout_s: float) -> list[JobQuery]:
    """scontrol's state of each job (what `runbook slurm submit` asks before submitting another). A controller
    that did not answer in time is not asked again: one timeout, not one per job."""
    queries = []
    for job_id in job_ids:
        view, answer = ask_job(job_id, timeout_s)
        queries.append(JobQuery(job_id, view.state if view else None, answer.text.strip() if answer.ok else answer.text))
        if answer.timed_out:
            break
    return queries


def requeue(job_id: str, timeout_s: float) -> Answer:
    return run_command(["scontrol", "requeue", job_id], timeout_s)


def sacct_allocations(job_id: str, timeout_s: float) -> tuple[list[dict[str, str]], str | None]:
    """Each allocation of the job as the accounting database saw it; [] and why where there is none
    (clusters without slurmdbd answer "accounting storage is disabled")."""
    answer = run_command(["sacct", "-j", job_id, "--duplicates", "-X", "--parsable2", "--noheader",
                          "--format=JobID,State,Start,End,NodeList,ExitCode"], timeout_s)
    if not answer.ok:
        return [], answer.text
    return parse_sacct(answer.text), None


def sacct_ends(job_ids: list[str], timeout_s: float) -> tuple[dict[tuple[str, int], AllocationEnd], str | None]:
    """How each allocation of these jobs ended, as sacct says (engine/cluster/sacct.py), keyed by (job id,
    restart); {} and why where there is no answer (no sacct, accounting disabled, a slow database)."""
    if not job_ids:
        return {}, None
    answer = run_command(["sacct", "-j", ",".join(job_ids), "--duplicates", "-X", "--parsable2", "--noheader",
                          f"--format={FORMAT}"], timeout_s)
    if not answer.ok:
        return {}, answer.text
    return by_allocation(parse_allocation_ends(answer.text)), None
