"""An append-only, fsynced journal of everything the engine did, and the state rebuilt from it.

A watcher that crashed and is started again reads the journal to continue the same run: which
launch is current, which incident is open and which of its actions already ran, how often each
playbook fired. Each line carries its own checksum (engine/records/journal_lines.py): a torn, edited or
garbage line is skipped and reported as file:line, and every line after it is still read, so one bad
line can never hide the history behind it (the attempt counts of limits and the circuit breaker
included).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.records.journal_lines import BadLine, decode, encode, recover_glued
from engine.core.crash_points import crash_point
from engine.core.text_safety import redact_tree
from engine.records.attempts import AttemptHistory
from engine.core.state import RunPhase
from engine.core.write_trouble import PartialAppend, WriteTrouble, append_whole, passing


@dataclass
class JournalReplay:
    phase: RunPhase = RunPhase.STARTING
    launches: int = 0
    trainer_pid: int | None = None
    trainer_log: str | None = None
    trainer_started: float | None = None       # the trainer's process start time, to recognise it again
    resumed_from: str | None = None            # the last launch's resume file (None: from scratch)
    divergences: list[int] = field(default_factory=list)   # first bad steps of the divergence rollbacks
    open_incident: dict | None = None          # the incident_opened entry
    done_actions: list[int] = field(default_factory=list)
    # The launch made inside the open incident after its last journaled action: the step that made it was cut
    # off (a watcher killed) before it was journaled done, and a restarted watcher keeps that launch.
    launch_since_last_action: int | None = None
    history: AttemptHistory = field(default_factory=AttemptHistory)
    extra_env: dict[str, str] = field(default_factory=dict)
    diagnostic_env: dict[str, str] = field(default_factory=dict)   # set_env's diagnostic variables not yet lifted
    env_effects: list[dict] = field(default_factory=list)   # each env change's throughput before and after
    incidents: list[str] = field(default_factory=list)
    unreported: list[str] = field(default_factory=list)   # closed, but not yet in the run log / notifier
    last_exit_code: int | None = None
    last_exit_signal: str | None = None
    start_errors: dict[str, str | None] = field(default_factory=dict)   # ended launches by log: start-up failure or None


@dataclass(frozen=True)
class JournalProblem:
    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}; skipped that line, read the rest"


class JournalUnreadable(OSError):
    """The journal file itself cannot be read (a folder, no permission, an I/O error)."""


def crash_point_torn(kind: str) -> bool:
    wanted = os.environ.get("RUNBOOK_CRASH_AT", "")
    return wanted.partition("#")[0] == f"journal-torn-{kind}"


class Journal:
    """Appends are fsynced whole lines. On a full disk (engine/core/write_trouble.py) an entry is held in
    memory, in order, and appended ahead of the next one once space returns; ``entries()`` includes
    the held ones, so this watcher's own decisions never miss what the disk has not got yet."""

    def __init__(self, path: Path, trouble: WriteTrouble | None = None):
        self.path = path
        self.problems: list[JournalProblem] = []   # of the last entries() call
        self.trouble = trouble or WriteTrouble()
        self._held: list[bytes] = []               # encoded lines not yet on disk, oldest first
        self._lock = threading.Lock()              # upkeep's thread may append (retention) too

    def append(self, kind: str, **data: object) -> dict:
        if "snapshot" in data:   # an incident's snapshot holds the trainer's log tail: any token it printed
            data["snapshot"] = redact_tree(data["snapshot"])   # (not every entry: a journaled env is replayed)
        entry = {"time": time.time(), "kind": kind, **data}
        line = encode(entry)
        with self._lock:
            if crash_point_torn(kind):   # the crash tests: half a line on disk, then the watcher dies
                self._write_torn(line, kind)
            self._held.append(line)
            try:
                self._write_held()
            except OSError:              # not a full disk: as before, the entry is not kept
                self._held.pop()
                raise
        return entry

    def flush(self) -> int:
        """Append what a full disk held back; returns how many entries are still only in memory."""
        with self._lock:
            try:
                self._write_held()
            except OSError as error:
                self.trouble.failed("the journal", error, f"keeping {len(self._held)} entries in memory")
            return len(self._held)

    @property
    def held(self) -> int:
        return len(self._held)

    def _write_held(self) -> None:
        if not self._held:
            return
        data = b"".join(self._held)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)  # at the first write: `watch --dry-run` creates nothing
            unsynced = append_whole(self.path, data, fresh_line=True)   # never glued onto a torn last line
        except PartialAppend as torn:   # the whole lines that got out are on disk; readers skip the torn rest
            del self._held[:data[:torn.written].count(b"\n")]
            self.trouble.failed("the journal", torn, f"keeping {len(self._held)} entries in memory, in order, "
                                "to append when space returns")
            return
        except OSError as error:
            if not passing(error):
                raise
            self.trouble.failed("the journal", error, f"keeping {len(self._held)} entries in memory, in order, "
                                "to append when space returns")
            return
        count, self._held = len(self._held), []
        if unsynced is not None:
            self.trouble.failed("the journal (fsync)", unsynced, "its entries were written but may not be on disk")
        self.trouble.worked("the journal", f"appended the {count} entries held in memory")

    def _write_torn(self, line: bytes, kind: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line[: len(line) // 2])
            os.fsync(fd)
        finally:
            os.close(fd)
        crash_point(f"journal-torn-{kind}")

    def entries(self) -> list[dict]:
        """Every valid entry in order; the skipped lines are in ``self.problems``."""
        self.problems = []
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as error:
            raise JournalUnreadable(f"cannot read the journal {self.path}: {error.strerror or error}") from None
        out = []
        for number, line in enumerate(raw.split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                out.append(decode(line))
            except BadLine as bad:
                glued = recover_glued(line)
                if glued is not None:
                    out.append(glued)
                    bad = BadLine(f"{bad} (a torn line; the entry glued after it was recovered)")
                self.problems.append(JournalProblem(self.path, number, str(bad)))
        return out + [decode(line[:-1]) for line in list(self._held)]

    def replay(self) -> JournalReplay:
        return rebuild(self.entries())


def _step_of(snapshot: object) -> int | None:
    """The step an incident's snapshot had reached (its metrics.step), if the entry holds a usable one."""
    metrics = snapshot.get("metrics") if isinstance(snapshot, dict) else None
    step = metrics.get("step") if isinstance(metrics, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def rebuild(entries: list[dict]) -> JournalReplay:
    s = JournalReplay()
    for e in entries:
        kind = e["kind"]
        if kind == "transition":
            s.phase = RunPhase(e["to"])
        elif kind == "launch":
            s.launches = e["launch"]
            s.trainer_pid = e["pid"]
            s.trainer_log = e["log"]
            s.trainer_started = e.get("started")
            s.resumed_from = e["resume_from"] if isinstance(e.get("resume_from"), str) else None
            s.launch_since_last_action = e["launch"] if s.open_incident is not None else None
        elif kind == "incident_opened":
            s.open_incident = e
            s.done_actions = []
            s.launch_since_last_action = None
            s.incidents.append(e["incident"])
            if e.get("decision") == "recover":
                s.history = s.history.record(e["playbook"], e["time"], _step_of(e.get("snapshot")))
        elif kind == "action_done":
            s.done_actions.append(e["index"])
            s.launch_since_last_action = None
        elif kind == "incident_reported":
            if e.get("incident") in s.unreported:
                s.unreported.remove(e["incident"])
        elif kind == "incident_closed":
            # older journals: reported; a line without an incident id names nothing to report
            if e.get("awaits_report") and isinstance(e.get("incident"), str) and e["incident"] not in s.unreported:
                s.unreported.append(e["incident"])
            if e.get("outcome") == "escalated" and s.open_incident:
                s.history = AttemptHistory(s.history.fired, s.history.escalated | {s.open_incident["playbook"]},
                                           s.history.recoveries)
            s.open_incident = None
            s.done_actions = []
            s.launch_since_last_action = None
        elif kind == "divergence_rollback":
            if isinstance(e.get("bad_step"), int):
                s.divergences.append(e["bad_step"])
        elif kind == "trainer_exited":
            s.last_exit_code, s.last_exit_signal = e.get("exit_code"), e.get("signal")
        elif kind == "launch_ended":
            s.start_errors.pop(e["log"], None)   # the newest last, once per log
            s.start_errors[e["log"]] = e.get("start_error")
        elif kind == "env":
            kept, other = (s.diagnostic_env, s.extra_env) if e.get("diagnostic") else (s.extra_env, s.diagnostic_env)
            kept.update(e["vars"])
            for name in e["vars"]:
                other.pop(name, None)
        elif kind == "env_restored":
            for name, value in (e.get("values") or {}).items():
                s.extra_env.pop(name, None)
                s.diagnostic_env.pop(name, None)
                if isinstance(value, str):
                    s.extra_env[name] = value
        elif kind == "env_effect":
            s.env_effects = [*s.env_effects[-9:], {k: e.get(k) for k in (
                "incident", "names", "launch", "tokens_per_sec_before", "tokens_per_sec_after")}]
        elif kind == "env_lifted":
            for name in e.get("names") or []:
                s.diagnostic_env.pop(name, None)
    return s
