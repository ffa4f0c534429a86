"""An append-only, fsynced journal of everything the engine did, and the state rebuilt from it.

A watcher that crashed and is started again reads the journal to continue the same run: which
launch is current, which incident is open and which of its actions already ran, how often each
playbook fired. A torn last line (a crash mid-write) is ignored, never misread.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

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


class Journal:
    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, kind: str, **data) -> dict:
        entry = {"time": time.time(), "kind": kind, **data}
        line = json.dumps(entry, sort_keys=True, default=str) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())  # one write of one line: readers see all of it or a torn tail
            os.fsync(fd)
        finally:
            os.close(fd)
        return entry

    def entries(self) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        with open(self.path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # torn last line from a crash mid-write
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
