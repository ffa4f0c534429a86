"""`runbook status [CONFIG] [--json]`: where the run stands, read from its folder; the exit code says its state.

Works in a second terminal while `runbook watch` runs, and after it ended: the journal says the
state and launches, heartbeat.json what the watcher last saw, the newest trainer log the latest
progress, the checkpoint folder what can be resumed from, the incident records what went wrong.
Reads only; never takes the watcher's lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.text import Text

from engine.core.run_folder import RunFolder
from engine.observe.throughput import eta_seconds
from engine.records.journal_lines import finite
from runbook.config_arg import chosen_config, config_argument, config_option
from runbook.commands.status_view import render, status_code
from runbook.exit_codes import ExitCode
from runbook.shown_values import step_problem, time_problem

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig
    from engine.core.state import RunPhase
    from engine.records.journal import JournalReplay

FULL_DISK_BYTES = 64 * 1024  # less than this free under run_dir: a journal line or a record may not fit
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def watcher_lock(run_dir: Path) -> tuple[int | None, str | None]:
    """(pid, None) of the `runbook watch` holding the run folder's lock; (pid or -1, why) when the lock
    is taken but the pid written in it is not running (stale) or not the holder; (None, None) when free."""
    from engine.core.lock import holder_text

    path = RunFolder(run_dir).lock
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None, None
    except OSError as error:   # a folder named watch.lock, no permission: nobody's lock we can see
        return None, f"{path} cannot be opened ({error.strerror})"
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)   # succeeds only when no watcher holds it
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            pid = int(text) if text.isdigit() and len(text) < 10 else -1
            who = holder_text(fd, path)
            return pid, (None if who == f"pid {pid}" else who)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None, None
    finally:
        os.close(fd)


def trainer_identity(loaded: LoadedConfig, journal: JournalReplay) -> dict:
    """Whether the journal's trainer runs and is provably this run's (engine/process/identity.py):
    a pid alone is not enough, another process may have it now."""
    from engine.process.identity import Identity, live_trainers_of
    from engine.process.trainer_process import read_exit_status

    pid = journal.trainer_pid
    found = {"alive": False, "proven": False, "why": "no launch recorded"}
    if pid:
        record = read_exit_status(loaded.folder.exit_status(journal.launches)) if journal.launches else {}
        proof = Identity(pid, journal.trainer_started, record).proof()
        found = {"alive": proof.ours, "proven": proof.ours, "why": proof.reason,
                 "pid_taken_by_another_process": proof.alive and not proof.ours}
    if not found["alive"]:
        # A launch the journal never recorded (its watcher was killed as it launched): the launcher's own
        # record still names a live trainer of this run folder; `runbook watch` re-attaches to it.
        for other, status_path in live_trainers_of(loaded.run_dir, except_pid=pid or None):
            launch = loaded.folder.launch_of(status_path) or 0
            if launch > journal.launches:
                return {"alive": True, "proven": True, "pid": other, "unjournaled_launch": launch,
                        "why": f"pid {other}: launched as launch {launch} by a watcher killed "
                               f"before its journal recorded it ({status_path})"}
    return found


def trainer_gone(entries: list[dict], run_state: RunPhase | str) -> bool:
    """PURE. Has the journal's newest trainer ended: its exit journaled after its launch, or the run completed?
    The watcher's last heartbeat may be older than that (written while it trained), so it is no word on it."""
    kinds = [e.get("kind") for e in entries]
    last_launch = max((i for i, k in enumerate(kinds) if k == "launch"), default=-1)
    last_exit = max((i for i, k in enumerate(kinds) if k == "trainer_exited"), default=-1)
    return last_exit > last_launch or getattr(run_state, "value", run_state) == "completed"


def gather(loaded: LoadedConfig, now: float | None = None) -> dict:
    """Everything `status` shows, as plain data (the --json output)."""
    from engine.observe.observer import disk_status
    from runbook.report import read_history

    now = time.time() if now is None else now
    h = read_history(loaded, only_newest_launch=True, with_incidents=False)
    incidents = incident_summary(loaded.run_dir)
    transitions = [e for e in h.journal_entries if e.get("kind") == "transition"]
    last = transitions[-1] if transitions else None
    watcher_pid, watcher_note = watcher_lock(loaded.run_dir)
    launch = h.launches[-1] if h.launches else None

    progress = None
    if launch is not None and launch.steps and launch.metrics is not None:
        # The watch's own figures for this log (runbook/report.py parse_launch): the same parser, tracker and
        # throughput arithmetic (engine/observe/throughput.py) as its heartbeat and Prometheus metrics.
        tps = launch.metrics.tokens_per_sec
        eta = eta_seconds(h.meaning, h.total_steps - launch.last_step, tps)
        progress = {
            "step": launch.last_step, "total_steps": h.total_steps,
            "percent": round(100 * launch.last_step / h.total_steps, 1) if h.total_steps else None,
            "loss": launch.losses[-1],
            "val_loss": launch.val_losses[-1] if launch.val_losses else None,
            "final_val_loss": launch.final_val_loss,
            "tokens": launch.metrics.tokens,
            "tokens_per_sec": round(tps, 1) if tps else None, "eta_seconds": round(eta) if eta else None,
            "seconds_since_log_written": round(now - launch.log.stat().st_mtime, 1) if launch.log.exists() else None,
            "log": str(launch.log),
        }

    from engine.core.bounded_read import read_json_record
    from engine.core.errors import SourceError

    heartbeat, heartbeat_problem, heartbeat_invalid = None, None, None
    beat_path = loaded.folder.heartbeat
    if beat_path.is_file():
        try:
            beat = read_json_record(beat_path)   # 100,000-deep JSON: one SourceError (a ValueError), no traceback
            if not isinstance(beat, dict):
                raise ValueError("heartbeat is not a JSON object")
            # A time of 1e300 would read "0 s ago": an invalid heartbeat is no heartbeat (and said so).
            if why := time_problem(beat.get("time"), now):
                heartbeat_invalid = f"heartbeat time invalid ({why})"
            else:
                step_why = step_problem(beat.get("step"))
                heartbeat = {"age_seconds": round(now - beat["time"], 1),
                             "step": None if step_why else beat.get("step"),
                             **({"step_invalid": step_why} if step_why else {}),
                             "trainer_alive": beat.get("trainer_alive"), "watcher_pid": beat.get("watcher_pid"),
                             **({"trainer_alive": False, "trainer_exited": True}
                                if beat.get("trainer_alive") and trainer_gone(h.journal_entries, h.journal.phase)
                                else {}),
                             "held_in_memory": beat.get("held_in_memory") or {}}
        except (OSError, ValueError, KeyError, TypeError, OverflowError) as error:   # OverflowError: a 400-digit time
            heartbeat = None   # being replaced right now, or foreign: the other sources still answer
            if isinstance(error, SourceError):
                heartbeat_problem = f"{error} (heartbeat skipped)"

    from runbook.notices import summary

    notices = summary(loaded)   # every receiver's outbox (Slack, webhooks, e-mail)
    notices["oldest_age_seconds"] = (round(now - notices["oldest_queued_at"], 1)
                                     if notices["oldest_queued_at"] is not None else None)
    disk = disk_status(loaded.out_dir)
    sealed = [c.step for c in h.checkpoints if c.sealed]
    last_link = next((c.step for c in h.checkpoints if c.is_last), None)
    newest = incidents["newest"]
    slurm = slurm_status(loaded.run_dir, loaded.config.slurm.command_timeout_s)
    return {
        "config": str(loaded.path), "run_dir": str(loaded.run_dir), "out_dir": str(loaded.out_dir),
        "state": h.journal.phase.value,
        "last_transition": {"from": last.get("from"), "to": last.get("to"), "reason": last.get("reason"),
                            **({"seconds_ago": None, "time_invalid": why} if (why := time_problem(last.get("time"), now))
                               else {"seconds_ago": round(now - last["time"], 1)})} if last else None,
        "watcher": {"running": watcher_pid is not None, "pid": watcher_pid,
                    **({"note": watcher_note} if watcher_note else {})},   # note: a stale pid in watch.lock
        "trainer": {"pid": h.journal.trainer_pid, "launches": h.journal.launches,
                    "supervised": watcher_pid is not None, **trainer_identity(loaded, h.journal)},
        "progress": progress,
        "heartbeat": heartbeat,
        "heartbeat_invalid": heartbeat_invalid,   # the file's time is out of range: shown as such, counted as none
        "journal_tail": journal_tail_note(loaded, heartbeat, watcher_pid is not None),
        "disk": {"free_bytes": disk.free_bytes, "total_bytes": disk.total_bytes,
                 "free_percent": round(disk.free_percent, 1)},
        "checkpoints": {"steps": [c.step for c in h.checkpoints], "sealed_steps": sealed,
                        "last_link_step": last_link, "final": h.final_exists},
        "environment": {"in_force": {**h.journal.extra_env, **h.journal.diagnostic_env},
                        "diagnostic": sorted(h.journal.diagnostic_env), "effects": h.journal.env_effects},
        "notices": notices,
        "problems": h.problems + incidents["problems"] + ([heartbeat_problem] if heartbeat_problem else []) + (slurm["problems"] if slurm else []),
        "slurm": slurm,
        "incidents": {
            "count": incidents["count"], "by_outcome": incidents["by_outcome"],
            "open": h.journal.open_incident.get("incident") if h.journal.open_incident else None,
            "last": {k: newest.get(k) for k in ("id", "playbook", "outcome", "step_at_failure", "resumed_step",
                                                 "steps_lost", "tokens_lost", "recovery_seconds", "invalid")} if newest else None,
        },
    }


def incident_summary(run_dir: Path) -> dict:
    """The count by outcome and the newest record (checked as `report` checks each), without reading every
    record: at 100,000 records that took 278 s and 9.3 GB (engine/records/incident_index.py)."""
    from engine.records.incident_store import IncidentsUnreadable, IncidentStore
    from runbook.shown_values import checked_incident

    try:
        summary = IncidentStore(run_dir).summary()
    except IncidentsUnreadable as error:
        return {"count": 0, "by_outcome": {}, "newest": None, "problems": [str(error)]}
    newest, problems = checked_incident(summary.newest.to_json()) if summary.newest else (None, [])
    return {"count": summary.count, "by_outcome": summary.by_outcome, "newest": newest,
            "problems": summary.problems + problems}


def slurm_status(run_dir: Path, sacct_timeout_s: float | None = None) -> dict | None:
    """The SLURM job and every allocation the run used (run_dir/slurm/, engine/cluster/slurm_records.py),
    each with how sacct says it ended (engine/cluster/sacct.py: node failure, preemption, time limit,
    cancellation...) when sacct is here and answers within sacct_timeout_s; None for a run that never met SLURM."""
    from dataclasses import asdict

    from engine.cluster.slurm_commands import sacct_ends
    from engine.cluster.slurm_records import read_allocations, read_submission

    submission = read_submission(run_dir)
    allocations, problems = read_allocations(run_dir)
    if submission is None and not allocations:
        return None
    job_ids = list(dict.fromkeys([*([submission.job_id] if submission else []), *(a.job_id for a in allocations)]))
    ends, why = ({}, "sacct is not on PATH") if sacct_timeout_s is None or not shutil.which("sacct") else \
        sacct_ends(job_ids, sacct_timeout_s)
    rows = []
    for a in allocations:
        row = a.model_dump(exclude={"schema_version"})
        row["evidence"] = a.scheduler_said   # its old name, for the readers of earlier versions' --json
        end = ends.get((a.job_id, a.restart))
        row["sacct"] = asdict(end) if end else None
        rows.append(row)
    return {"job_id": job_ids[-1], "job_ids": job_ids,
            "submitted_at": submission.submitted_at if submission else None,
            "allocations": rows, "sacct_problem": why, "problems": problems}


def journal_tail_note(loaded: LoadedConfig, heartbeat: dict | None, watching: bool) -> str | None:
    """Why the journal on disk may lack its newest entries (a watcher keeps them in memory while its
    run folder's disk is full, engine/records/journal.py), or None."""
    held = (heartbeat or {}).get("held_in_memory") or {}
    if held:
        return ("the watcher's last heartbeat says it held " + ", ".join(f"{n} {k}" for k, n in held.items())
                + " in memory (a full disk); the journal's tail may be missing")
    if not watching:
        return None
    try:
        free = shutil.disk_usage(loaded.run_dir).free
    except OSError:
        return None
    if free < FULL_DISK_BYTES:
        return (f"the run folder's disk is full ({free:,} bytes free): the watcher keeps what it cannot write in "
                "memory, so the journal's tail, incident records and heartbeat may be missing or stale")
    return None


def status(
    config: Optional[Path] = config_argument(),
    config_opt: Optional[Path] = config_option(),
    as_json: bool = typer.Option(False, "--json", help="one JSON object"),
) -> None:
    """Where the run stands: state, step, loss, speed, checkpoints, incidents (live or after the end).
    Exits 0 completed, 4 escalated, 7 stopped, 12 unfinished with no watcher, 13 running."""
    from runbook.commands.common import load_started_run

    from engine.records.journal import JournalUnreadable

    loaded = load_started_run(chosen_config(config, config_opt), launched_is_started=True)
    try:
        data = gather(loaded)
    except JournalUnreadable as error:
        err.print(f"error: {error}; nothing was changed", markup=False)
        raise typer.Exit(int(ExitCode.NOT_FOUND)) from None
    for problem in data["problems"]:
        err.print(f"warning: {problem}", markup=False)
    if as_json:
        print(json.dumps(finite(data), indent=2, allow_nan=False))   # JSON has no NaN
    else:
        for line in render(data):
            out.print(Text(line))
    raise typer.Exit(int(status_code(data)))
