"""The watcher inside a SLURM job (SLURM_JOB_ID set): it records its allocation, asks scontrol why a notice
came, and after the notice's save requeues its own job when the notice means "yield the node".

The supervisor calls three hooks: started() once it holds the run folder, noticed(why) when a stop
request arrived and the notice's save is done (asked after, so that a slow controller never eats the
grace time; what tells the cause lasts: RunTime only grows, PreemptTime and CANCELLED stay, an outside
requeue goes COMPLETING -> PENDING), finished(state) after the watch loop ended and the lock is released.
Deciding is pure (engine/cluster/slurm.py); the commands are bounded (engine/cluster/slurm_commands.py).
"""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING

from engine.core.events import Publish, WatchWarning, ignore
from engine.core.journal_writer import JournalWriter
from engine.cluster import slurm_commands
from engine.cluster.slurm import classify_notice, previous_ending, should_requeue
from engine.cluster.slurm_records import Allocation, read_allocations, write_allocation
from engine.core.state import RunPhase

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig


class SlurmAllocation:
    def __init__(self, loaded: LoadedConfig, journal: JournalWriter, job_id: str, restart: int,
                 events: Publish | None = None):
        self.loaded = loaded
        self.journal = journal
        self.events = events or ignore
        self.settings = loaded.config.slurm
        self.record = Allocation(job_id=job_id, restart=restart, node=os.environ.get("SLURMD_NODENAME")
                                 or socket.gethostname(), started_at=time.time(), watcher_pid=os.getpid())
        self.requeue_wanted = False

    @classmethod
    def from_environment(cls, loaded: LoadedConfig, journal: JournalWriter,
                         events: Publish | None = None) -> "SlurmAllocation | None":
        job_id = os.environ.get("SLURM_JOB_ID", "")
        if not job_id.isdigit():
            return None
        restart = os.environ.get("SLURM_RESTART_COUNT", "0")
        return cls(loaded, journal, job_id, int(restart) if restart.isdigit() else 0, events)

    def _write(self) -> None:
        try:
            write_allocation(self.loaded.run_dir, self.record)
        except OSError as error:   # a full disk: the journal entries still say it
            self.events(WatchWarning(f"could not write the SLURM allocation record: {error}"))

    def started(self) -> None:
        self._close_unended()
        self._write()
        self.journal.append("slurm_allocation", job_id=self.record.job_id, restart=self.record.restart,
                            node=self.record.node)

    def _close_unended(self) -> None:
        """An earlier allocation whose watcher never wrote its end: the node failed, or it was killed hard."""
        allocations, _ = read_allocations(self.loaded.run_dir)
        for earlier in allocations:
            if earlier.ended is not None or (earlier.job_id, earlier.restart) == (self.record.job_id, self.record.restart):
                continue
            rows, why_none = slurm_commands.sacct_allocations(earlier.job_id, self.settings.command_timeout_s)
            state = previous_ending(rows, None) if rows else None
            said = f"sacct: {state}" if state else f"no accounting answer ({why_none or 'no finished row'})"
            closed = earlier.model_copy(update={
                "ended_at": self.record.started_at,
                "ended": ("node failure" if state == "NODE_FAIL" else
                          f"ended without a word from its watcher (sacct: {state})" if state else
                          "ended without a word from its watcher (a node failure or a kill without notice)"),
                "scheduler_said": said})
            try:
                write_allocation(self.loaded.run_dir, closed)
            except OSError:
                pass
            self.journal.append("slurm_allocation_lost", job_id=earlier.job_id, restart=earlier.restart,
                                node=earlier.node, ended=closed.ended, scheduler_said=said)

    def noticed(self, why: str) -> None:
        job, raw = slurm_commands.show_job(self.record.job_id, self.settings.command_timeout_s)
        cause, said = classify_notice(job, self.settings.signal_lead_s)
        self.requeue_wanted = should_requeue(cause, self.settings.requeue_on, job, "SIGINT" if "SIGINT" in why else "SIGTERM")
        self.record = self.record.model_copy(update={"notice_cause": cause, "scheduler_said": said})
        self._write()
        self.journal.append("slurm_notice", job_id=self.record.job_id, restart=self.record.restart, reason=why,
                            cause=cause, scheduler_said=said, requeue=self.requeue_wanted,
                            scontrol=raw[:2000] if job is None else None)
        self.events(WatchWarning(f"SLURM job {self.record.job_id}: notice cause {cause} ({said})"
                    + ("; requeueing the job (scontrol requeue)" if self.requeue_wanted else "; no requeue")))

    def finished(self, state: RunPhase) -> None:
        """Record how this allocation ended; requeue the job when the notice asked for it and the run
        stopped resumably. SLURM then TERMs this job's processes: the record is written before."""

        requeue = self.requeue_wanted and state == RunPhase.STOPPED
        cause = self.record.notice_cause
        ended = (f"requeued after a {cause} notice" if requeue else "requeued by SLURM" if cause == "requeued" else
                 f"{state.value}" + (f" after a {cause} notice" if cause else ""))
        self.record = self.record.model_copy(update={"ended_at": time.time(), "ended": ended, "requeued": requeue})
        self._write()
        if not requeue:
            return
        self.journal.append("slurm_requeue", job_id=self.record.job_id, restart=self.record.restart,
                            cause=self.record.notice_cause)
        answer = slurm_commands.requeue(self.record.job_id, self.settings.command_timeout_s)
        if not answer.ok:
            self.record = self.record.model_copy(update={"requeued": False,
                                                         "ended": f"stopped; the requeue failed: {answer.text}"})
            self._write()
            self.journal.append("slurm_requeue_failed", job_id=self.record.job_id, error=answer.text)
            self.events(WatchWarning(f"SLURM requeue of job {self.record.job_id} failed: {answer.text}"))
