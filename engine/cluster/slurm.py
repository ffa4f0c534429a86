"""SLURM, the pure part: read scontrol's view of a job, tell why a notice came, decide a requeue, write
the job script. No process is started here (engine/cluster/slurm_commands.py runs scontrol, sbatch, sacct;
engine/cluster/slurm_watch.py is what the watcher does with the answers).

Why a SIGTERM reached the watcher, from `scontrol show job -o` at the moment it came:
- time-limit: the job's remaining time (TimeLimit - RunTime) is within the signal lead (+ slack: SLURM
  checks limits about every 30 s and signals early, up to 35 s measured for a lead of 10 s);
- preemption: PreemptTime is set (SLURM's preemption notice, before GraceTime runs out);
- cancelled: JobState CANCELLED (a plain `scancel`): the user wants the job gone, never requeued;
- requeued: JobState COMPLETING (measured for an outside `scontrol requeue`) or a requeue state: SLURM
  already ends this allocation and runs the job again; a requeue of ours would fail ("pending execution");
- signal: the job runs on with nothing above: `scancel --signal=TERM -b/-f`, or a site's own notice
  script. Treated as "save and yield the node" (requeue), unless `slurm.requeue_on` leaves it out;
- unknown: scontrol did not answer.
A node failure sends nothing: the next allocation finds the previous one's record never ended.
"""

from __future__ import annotations

from engine.core.settings import REQUEUE_CAUSES, SlurmSettings  # noqa: F401 - the settings model lives in core
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import Literal


NoticeCause = Literal["time-limit", "preemption", "cancelled", "requeued", "signal", "unknown"]
ENDING_STATES = ("COMPLETING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "PENDING")
LIMIT_CHECK_SLACK_S = 60.0   # SLURM's limit check runs ~every 30 s; measured: a lead of 10 s signalled 35 s early
_DURATION = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


@dataclass(frozen=True)
class JobView:
    """The few fields of `scontrol show job -o` that tell why a notice came and where the job runs."""

    job_id: str
    state: str                  # RUNNING, CANCELLED, PENDING, ...
    reason: str
    run_time_s: float | None
    time_limit_s: float | None  # None: UNLIMITED
    preempt_time: str | None    # None: not preempted
    restarts: int
    node: str
    start_time: str
    batch: bool = True          # BatchFlag: only a batch job can be requeued (not an salloc/srun session)


def parse_duration(text: str) -> float | None:
    """SLURM's [D-]HH:MM:SS, MM:SS or minutes, in seconds; None for UNLIMITED and the like."""
    match = _DURATION.match(text.strip())
    if not match:
        return None
    days, a, b, c = match.groups()
    parts = [int(x) for x in (a, b, c) if x is not None]
    if days is not None:   # D-HH[:MM[:SS]]
        seconds = [3600, 60, 1]
    else:                  # MM, MM:SS, HH:MM:SS
        seconds = {1: [60], 2: [60, 1], 3: [3600, 60, 1]}[len(parts)]
    return int(days or 0) * 86400 + sum(p * s for p, s in zip(parts, seconds))


def parse_show_job(text: str) -> dict[str, str]:
    """`scontrol show job -o ID` -> its Key=Value fields (values with spaces, like Command, are cut)."""
    fields: dict[str, str] = {}
    for part in text.split():
        key, sep, value = part.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def job_view(fields: dict[str, str]) -> JobView | None:
    if "JobId" not in fields or "JobState" not in fields:
        return None
    preempt = fields.get("PreemptTime", "None")
    restarts = fields.get("Restarts", "0")
    return JobView(job_id=fields["JobId"], state=fields["JobState"], reason=fields.get("Reason", "None"),
                   run_time_s=parse_duration(fields.get("RunTime", "")),
                   time_limit_s=parse_duration(fields.get("TimeLimit", "")),
                   preempt_time=None if preempt in ("None", "Unknown", "") else preempt,
                   restarts=int(restarts) if restarts.isdigit() else 0,
                   node=fields.get("BatchHost") or fields.get("NodeList", ""), start_time=fields.get("StartTime", ""),
                   batch=fields.get("BatchFlag", "1") != "0")


def classify_notice(job: JobView | None, signal_lead_s: float) -> tuple[NoticeCause, str]:
    """PURE. Why the notice came, and what scontrol said of it in one sentence."""
    if job is None:
        return "unknown", "scontrol did not describe the job"
    if job.state.startswith("CANCELLED"):
        return "cancelled", f"JobState {job.state}: the job was cancelled (scancel)"
    if job.preempt_time is not None:
        return "preemption", f"PreemptTime {job.preempt_time}: SLURM preempts the job"
    if job.state in ENDING_STATES:
        return "requeued", (f"JobState {job.state}: SLURM is ending this allocation itself (scontrol requeue, or "
                            "the scheduler) and runs the job again")
    if job.time_limit_s is not None and job.run_time_s is not None:
        remaining = job.time_limit_s - job.run_time_s
        if remaining <= signal_lead_s + LIMIT_CHECK_SLACK_S:
            return "time-limit", (f"{remaining:.0f} s left of the {job.time_limit_s:.0f} s time limit "
                                  f"(signal lead {signal_lead_s:g} s)")
    if job.state == "PREEMPTED":
        return "preemption", "JobState PREEMPTED"
    left = "no time limit" if job.time_limit_s is None else f"{job.time_limit_s - (job.run_time_s or 0):.0f} s left"
    return "signal", (f"JobState {job.state}, no preemption, {left}: a signal sent to the job "
                      "(scancel --signal, or an administrator's or site's notice)")


def should_requeue(cause: NoticeCause, requeue_on: Sequence[str], job: JobView | None = None,
                   stop_signal: str = "SIGTERM") -> bool:
    """PURE. Requeue after the save only for a notice that means "yield the node": never for a cancel,
    a Ctrl-C (SIGINT: a person stopping the watcher), or a job that is no batch job (SLURM refuses)."""
    if job is not None and not job.batch:
        return False
    return cause in requeue_on and stop_signal != "SIGINT"


def parse_sacct(text: str) -> list[dict[str, str]]:
    """`sacct -j ID --duplicates -X --parsable2 --noheader --format=JobID,State,Start,End,NodeList,ExitCode`
    -> one dict per allocation, oldest first."""
    rows = []
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) >= 6:
            rows.append(dict(zip(("job_id", "state", "start", "end", "node", "exit_code"), cells)))
    return rows


def previous_ending(rows: list[dict[str, str]], started: str | None) -> str | None:
    """PURE. How sacct says an earlier allocation ended (NODE_FAIL, PREEMPTED, TIMEOUT, REQUEUED...),
    the one that started at `started` when given, else the newest that is not running."""
    done = [r for r in rows if r["state"] not in ("RUNNING", "PENDING")]
    if started:
        done = [r for r in done if r["start"] == started] or done
    return done[-1]["state"] if done else None


def job_script(*, project_dir: Path, config_path: Path, runbook: str, output: Path, settings: SlurmSettings,
               job_name: str, nodes: int = 1) -> str:
    """PURE. The batch script: its only step is `runbook watch`, exec'd so that the batch shell IS the
    watcher (the B: signal ahead of the time limit and `scancel -b` reach it, with no shell in between).
    nodes > 1 (trainer.num_nodes): that many hosts, one task each; the watcher runs on the first and starts
    one torchrun agent per host through `srun` (engine/trainers/litgpt/nodes.py)."""
    tasks = [f"#SBATCH --nodes={nodes}", "#SBATCH --ntasks-per-node=1"] if nodes > 1 else ["#SBATCH --ntasks=1"]
    lines = ["#!/bin/bash", f"#SBATCH --job-name={job_name}", "#SBATCH --requeue",
             f"#SBATCH --signal=B:TERM@{settings.signal_lead_s}", "#SBATCH --open-mode=append",
             f"#SBATCH --output={output}", *tasks]
    if settings.partition:
        lines.append(f"#SBATCH --partition={settings.partition}")
    if settings.time:
        lines.append(f"#SBATCH --time={settings.time}")
    lines += [f"#SBATCH {option}" for option in settings.sbatch_options]
    lines += [
        "# Written by `runbook slurm submit`. A requeued job runs this again: `runbook watch` resumes the run",
        "# from its newest verified checkpoint, and requeues the job itself after a time-limit or preemption notice.",
        f"cd {shlex.quote(str(project_dir))} || exit 1",
        'echo "runbook: job $SLURM_JOB_ID allocation ${SLURM_RESTART_COUNT:-0} on $(hostname) at $(date -Is)"',
        f"exec {shlex.quote(runbook)} watch {shlex.quote(str(config_path))}",
        "",
    ]
    return "\n".join(lines)


def submit_argv(script: Path, options: list[str]) -> list[str]:
    """sbatch's argv: options given on the command line win over the script's #SBATCH lines."""
    return ["sbatch", "--parsable", *options, str(script)]


def parse_job_id(sbatch_stdout: str) -> str | None:
    """`sbatch --parsable` prints `ID` or `ID;cluster`."""
    first = sbatch_stdout.strip().splitlines()[0] if sbatch_stdout.strip() else ""
    job_id = first.split(";")[0].strip()
    return job_id if job_id.isdigit() else None


# A job of the run in one of these states holds its run folder now or will when it starts (or starts
# again): a second job's watcher would only find the lock taken (exit 5). Every other state (COMPLETED,
# FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED...) ended it; a job SLURM no longer knows
# (past MinJobAge) ended long ago.
LIVE_STATES = frozenset({"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING",
                         "COMPLETING", "SUSPENDED", "STOPPED", "RESIZING", "SIGNALING", "STAGE_OUT"})
UNKNOWN_JOB = "Invalid job id specified"   # scontrol's and squeue's words for a job id SLURM does not know


@dataclass(frozen=True)
class JobQuery:
    """What SLURM said about one job the run folder's records name."""

    job_id: str
    state: str | None   # JobState; None: no description (the job is unknown, or scontrol did not answer)
    answer: str         # scontrol's answer, or why there is none


def live_job_refusal(queries: list[JobQuery]) -> tuple[str | None, list[str]]:
    """PURE. Whether `runbook slurm submit` refuses because a job of this run is still pending or running:
    (the refusal in one sentence, or None; warnings). A job SLURM no longer knows or that ended is no
    reason; neither is one it could not be asked about (a warning: the lock still keeps a second
    watcher off the run, sbatch itself will say whether the controller answers)."""
    warnings: list[str] = []
    for query in queries:
        state = (query.state or "").split("+")[0].upper()
        if state in LIVE_STATES:
            return (f"job {query.job_id} of this run is still {state}: its watcher holds the run (or will when "
                    f"it starts), and a second job's would find it taken (exit 5). Wait for it to end, or "
                    f"cancel it first: scancel {query.job_id}"), warnings
        if query.state is None and UNKNOWN_JOB.lower() not in query.answer.lower():
            warnings.append(f"could not ask SLURM whether job {query.job_id} of this run still runs "
                            f"({query.answer}); submitting anyway")
    return None, warnings
