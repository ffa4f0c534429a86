"""An append-only, fsynced journal of everything the engine did, and the state rebuilt from it.

A watcher that crashed and is started again reads the journal to continue the same run: which
launch is current, which incident is open and which of its actions already ran, how often each
playbook fired. Each line carries its own checksum (engine/journal_records.py): a torn, edited or
garbage line is skipped and reported as file:line, and every line after it is still read, so one bad
line can never hide the history behind it (the attempt counts of limits and the circuit breaker
included).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.journal_records import BadLine, decode, encode, recover_glued
from engine.crash_points import crash_point
from engine.matcher import AttemptHistory
from engine.state import RunState


@dataclass
class JournalState:
    run_state: RunState = RunState.STARTING
    launches: int = 0
    trainer_pid: int | None = None
    trainer_log: str | None = None
    trainer_started: float | None = None       # the trainer's process start time, to recognise it again
    open_incident: dict | None = None          # the incident_opened entry
    done_actions: list[int] = field(default_factory=list)
    history: AttemptHistory = field(default_factory=AttemptHistory)
    extra_env: dict[str, str] = field(default_factory=dict)
    incidents: list[str] = field(default_factory=list)
    last_exit_code: int | None = None
    last_exit_signal: str | None = None


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
    def __init__(self, path: Path):
        self.path = path
        self.problems: list[JournalProblem] = []   # of the last entries() call

    def append(self, kind: str, **data) -> dict:
        entry = {"time": time.time(), "kind": kind, **data}
        line = encode(entry)
        self.path.parent.mkdir(parents=True, exist_ok=True)  # at the first write: `watch --dry-run` creates nothing
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line   # a torn last line (crash mid-write) must not swallow this one
            if crash_point_torn(kind):   # the crash tests: half a line on disk, then the watcher dies
                os.write(fd, line[: len(line) // 2])
                os.fsync(fd)
                crash_point(f"journal-torn-{kind}")
            os.write(fd, line)  # one write of one line: readers see all of it or a torn tail
            os.fsync(fd)
        finally:
            os.close(fd)
        return entry

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
        return out

    def replay(self) -> JournalState:
        return rebuild(self.entries())


def rebuild(entries: list[dict]) -> JournalState:
    s = JournalState()
    for e in entries:
        kind = e["kind"]
        if kind == "transition":
            s.run_state = RunState(e["to"])
        elif kind == "launch":
            s.launches = e["launch"]
            s.trainer_pid = e["pid"]
            s.trainer_log = e["log"]
            s.trainer_started = e.get("started")
        elif kind == "incident_opened":
            s.open_incident = e
            s.done_actions = []
            s.incidents.append(e["incident"])
            if e.get("decision") == "recover":
                s.history = s.history.record(e["playbook"], e["time"])
        elif kind == "action_done":
            s.done_actions.append(e["index"])
        elif kind == "incident_closed":
            if e.get("outcome") == "escalated" and s.open_incident:
                s.history = AttemptHistory(s.history.fired, s.history.escalated | {s.open_incident["playbook"]})
            s.open_incident = None
            s.done_actions = []
        elif kind == "trainer_exited":
            s.last_exit_code, s.last_exit_signal = e.get("exit_code"), e.get("signal")
        elif kind == "env":
            s.extra_env.update(e["vars"])
    return s
