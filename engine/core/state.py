"""The typed live-state snapshot: everything the matcher may look at, at one instant.

A snapshot is plain data (JSON-serialisable), so an incident can store the exact state that fired
it and `replay`/`explain` can re-evaluate it later without a running trainer.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from engine.core.evidence import Evidence


class RunPhase(str, Enum):
    STARTING = "starting"
    RUNNING = "running"
    INCIDENT = "incident"
    RECOVERING = "recovering"
    COMPLETED = "completed"
    ESCALATED = "escalated"
    STOPPED = "stopped"          # the watcher was asked to stop; the run can be resumed later


TERMINAL_PHASES = {RunPhase.COMPLETED, RunPhase.ESCALATED, RunPhase.STOPPED}


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RankStatus(Frozen):
    """One rank, from its own heartbeat (written inside the trainer) and its process seen from outside."""

    rank: int
    node: int | None = None             # the node (launcher agent) it runs on, with several nodes (engine/process/nodes.py)
    pid: int | None = None
    alive: bool = False
    stopped: bool = False               # process state T
    exit_code: int | None = None        # None: still running, or nobody could record it
    signal: str | None = None
    ended_at: float | None = None
    step: int | None = None             # optimizer steps this rank has finished
    iter_num: int | None = None         # micro-batches this rank has started
    phase: str | None = None            # "work" (data + forward) or "sync" (backward with the gradient all-reduce)
    seconds_since_heartbeat: float | None = None
    work_seconds: float | None = None   # median of the rank's own work per micro-batch (no collective wait)
    host: str | None = None             # across hosts: the host it runs on (its heartbeat's)
    seconds_since_record: float | None = None   # a rank on another host: age of its host's record (host_records.py)
    error: str | None = None            # its own error: the exception it recorded, or its launcher's report of it
    where: str | None = None            # file:line in the user's own code where that exception was raised
    peer_loss: bool = False             # that error is a collective's lost peer: it followed another rank's failure
    exit_from_launcher: bool = False    # its exit is known only from its launcher's report (the log says it too)


class NodeStatus(Frozen):
    """One node's launcher agent (torchrun), with several nodes: its process and how it ended."""

    node: int
    pid: int | None = None
    alive: bool = False
    exit_code: int | None = None        # Popen's convention: negative for a signal
    signal: str | None = None
    requested: bool = False             # ended by runbook's own stop, not by a fault
    notice: str | None = None           # a signal its agent said it got from outside ("SIGTERM": that node preempted)
    ranks: list[int] = Field(default_factory=list)
    host: str | None = None             # the host the agent runs on
    lost: bool = False                  # another host whose records stopped being renewed: the host is gone
    seconds_since_record: float | None = None   # another host: age of its newest record


class RanksStatus(Frozen):
    """Every rank of a multi-rank trainer; empty (world_size 1) for one process. Lists hold rank numbers."""

    world_size: int = 1
    ranks: list[RankStatus] = Field(default_factory=list)
    exited: list[int] = Field(default_factory=list)      # ranks whose process is gone
    failed: list[int] = Field(default_factory=list)      # ended with a non-zero code or a signal
    first_failed: int | None = None     # the rank that failed first: the cause, the others followed it
    first_failed_signal: str | None = None   # the signal that ended it, if one did
    first_failed_exit_code: int | None = None
    first_failed_error: str | None = None    # its own error (an exception, or its launcher's report), if known
    first_failed_where: str | None = None    # file:line in the user's code where it raised (a restart cannot fix it)
    first_failed_peer_loss: bool = False     # every failure is a lost peer: the collective itself failed
    under_launcher: bool = False        # every rank is a worker of a launcher (torchrun, accelerate, deepspeed, srun),
                                        # rank 0 included: the trainer process is the launcher
    stopped: list[int] = Field(default_factory=list)     # in state T (SIGSTOP, a freezer, a debugger)
    stalled: list[int] = Field(default_factory=list)     # the ranks the others wait for (stopped, or behind)
    straggler: int | None = None        # a rank whose work per micro-batch is over k x the other ranks' median
    straggler_ratio: float | None = None
    nodes: list[NodeStatus] = Field(default_factory=list)   # empty on one node
    dead_nodes: list[int] = Field(default_factory=list)     # agents killed by a fault signal (SIGKILL, ...), ranks with them
    noticed_nodes: list[int] = Field(default_factory=list)  # agents told to stop from outside (a SIGTERM to one node's launcher)
    # Every failed process (two or more) ended with this one error, by exit code, before the launch's first
    # progress line (engine/observe/same_start_error.py): deterministic, a restart meets it again.
    same_error_before_progress: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _derived_fields_are_not_input(cls, data: Any) -> Any:
        """A stored snapshot (an incident's) holds first_failed_cause as written; it is derived again, never taken."""
        if isinstance(data, dict) and "first_failed_cause" in data:
            data = {k: v for k, v in data.items() if k != "first_failed_cause"}
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def first_failed_cause(self) -> Literal["error", "peer-loss", "early-exit", "signal", "exit-code"] | None:
        """What the first failed rank's own records say: an exception of its own ("error"), a collective's lost
        peer ("peer-loss": the collective itself failed), an exit 0 while its peers trained ("early-exit"), a
        signal, or only an exit code."""
        if self.first_failed is None:
            return None
        if self.first_failed_error:
            return "peer-loss" if self.first_failed_peer_loss else "error"
        if self.first_failed_exit_code == 0:
            return "early-exit"
        return "signal" if self.first_failed_signal else "exit-code"


class TrainerStatus(Frozen):
    pid: int | None = None
    alive: bool = False
    exit_code: int | None = None        # negative: killed by that signal number (Popen convention)
    signal: str | None = None           # "SIGTERM" when exit_code == -15 or 128+15
    launches: int = 0
    seconds_running: float = 0.0
    stopped: bool = False               # process state T (SIGSTOP); a real deadlock looks running
    # Gone a moment ago, its launcher still writing the exit (at most 2 s), or every rank of a group gone a
    # moment ago while its launcher (torchrun's agents) still runs (at most 10 s): alive until that is
    # recorded; the watch loop decides nothing on such an observation (no hang, no exit yet).
    exit_pending: bool = False
    # A rank is gone with no known cause, or a survivor reported a lost peer, while the launcher lives: the
    # launcher's own report (torchrun's Root Cause) follows when it tears the group down. The watch loop waits
    # for it (bounded by watch.first_failure_wait_s) so that the rank that failed first decides.
    awaiting_first_failure: bool = False
    ranks: RanksStatus = Field(default_factory=RanksStatus)
    # "startup" until this launch's first progress line (preprocessing, imports, model build, checkpoint
    # load, compile), then "training"; "saving" from a save's announcement to the next progress line;
    # "validating" from the run's first validation's announcement (a trainer's `Validating ...`) to the next
    # progress line. These are judged by their signs of life, not by progress lines: a first save or a first
    # validation of a big model outlasts a timeout learnt from the training steps before it.
    phase: Literal["startup", "training", "saving", "validating"] = "training"
    # A trainer that ended before this launch's first progress line: how many launches in a row (this one
    # included) did so with the same error, its numbers masked (engine/observe/same_start_error.py); 0 otherwise.
    failed_alike_before_progress: int = 0
    # Start-up, saves and the first validation only: seconds since the trainer last showed life (new output, or
    # CPU time (start-up, validation) or I/O bytes advancing anywhere in its process tree); None when not
    # measured (training, or a dead trainer).
    seconds_since_activity: float | None = None


class Metrics(Frozen):
    step: int | None = None             # optimizer steps
    iter_num: int | None = None         # micro-batches
    tokens: int | None = None
    loss: float | None = None
    val_loss: float | None = None
    best_val_loss: float | None = None
    best_val_step: int | None = None
    loss_median: float | None = None    # rolling median of recent train losses
    loss_best_median: float | None = None  # the lowest rolling median seen in this run (spike baseline)
    loss_early_median: float | None = None  # the median of the run's first 3 finite losses (where it started)
    previous_bad_step: int | None = None   # the first bad step of this run's last divergence rollback (a repeat near it: the data)
    # Last step whose logged loss was <= 1.5 x that baseline (the loss of checkpoint step - 1); lowered
    # to s by a val loss at step s that is non-finite or > 1.5 x the best val loss (checkpoint s is bad).
    last_healthy_step: int | None = None
    loss_history: list[float] = Field(default_factory=list)
    tokens_per_sec: float | None = None
    baseline_tokens_per_sec: float | None = None
    grad_norm: float | None = None
    lr: float | None = None


class DiskStatus(Frozen):
    free_bytes: int = 0
    total_bytes: int = 0

    @property
    def free_percent(self) -> float:
        return 100.0 * self.free_bytes / self.total_bytes if self.total_bytes else 0.0


class CheckpointStatus(Frozen):
    count: int = 0
    newest_step: int | None = None
    newest_verified_step: int | None = None
    last_size_bytes: int = 0
    corrupt_steps: list[int] = Field(default_factory=list)


class StateSnapshot(Frozen):
    observation: int = 0
    time: float = 0.0
    run_state: RunPhase = RunPhase.RUNNING
    trainer: TrainerStatus = Field(default_factory=TrainerStatus)
    metrics: Metrics = Field(default_factory=Metrics)
    seconds_since_progress: float = 0.0
    hang_timeout_s: float = 120.0       # derived from this run's own progress gaps (see observer.py)
    startup_timeout_s: float = 14400.0  # watch.startup_timeout_s: the longest a launch may take to its first progress line
    save_timeout_s: float = 3600.0      # watch.save_timeout_s: the longest a save may take (from the last progress line)
    new_lines: list[str] = Field(default_factory=list)
    tail: list[str] = Field(default_factory=list)
    # How many of the tail's last lines came after the launch's last progress line (None: not known, the whole
    # tail): what a trainer printed before it went silent, apart from what it printed while it still trained.
    lines_since_progress: int | None = Field(None, ge=0)
    disk: DiskStatus = Field(default_factory=DiskStatus)
    checkpoints: CheckpointStatus = Field(default_factory=CheckpointStatus)
    evidence: Evidence = Field(default_factory=Evidence)   # beyond the log text (engine/observe/evidence.py)


def stall(state: StateSnapshot, seconds: float | None = None) -> tuple[str, float, float] | None:
    """PURE. What says whether a live trainer is stuck: (what, seconds, limit), stuck when seconds >=
    limit; None when the trainer is not running. `seconds` replaces the hang timeout.

    Training: seconds without a progress line against the hang timeout. Start-up (before the launch's
    first progress line: preprocessing, model build, checkpoint load, compile), a save (announced,
    no progress line since) and the run's first validation (announced, no progress line since) are not
    progress gaps: stuck when they have shown no sign of life (output, CPU time, I/O) for the hang timeout,
    or when they have lasted longer than startup_timeout_s or save_timeout_s (a validation too: it is
    the same stretch between two progress lines) even though they show life."""
    if not state.trainer.alive or state.trainer.exit_pending or state.trainer.awaiting_first_failure:
        return None
    limit = seconds or state.hang_timeout_s
    if state.trainer.phase == "training":
        return "no progress", state.seconds_since_progress, limit
    what, longest = {"startup": ("start-up", state.startup_timeout_s),
                     "validating": ("first validation", state.save_timeout_s)}.get(state.trainer.phase,
                                                                                 ("save", state.save_timeout_s))
    if state.seconds_since_progress >= longest:
        return what, state.seconds_since_progress, longest
    idle = state.trainer.seconds_since_activity
    return f"{what} without a sign of life", state.seconds_since_progress if idle is None else idle, limit
