"""The incident runner (engine/watch/incident_runner.py) with real parts: a project folder in tmp_path, the
run config the repository ships, playbooks written as YAML and read by the real loader, the real matcher's
decision and the real Supervisor's context (journal, incident store, run log). The trainer is never launched:
each incident is the answer to a recorded snapshot of a trainer that exited."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from engine.core.notifier import NullNotifier
from engine.core.state import RunState, StateSnapshot
from engine.language.loader import load_playbooks
from engine.language.matcher import AttemptHistory, Decision, MatchMemory, decide
from engine.trainers.run_config import load_config
from engine.watch.supervisor import Supervisor

REPO = Path(__file__).resolve().parents[2]

# a real failing step: a command that prints and exits 3
FAILING = [sys.executable, "-c", "import sys; print('disk check: 3 bad sectors'); sys.exit(3)"]
PASSING = [sys.executable, "-c", "print('all good')"]


class Notices(NullNotifier):
    def __init__(self):
        self.opened: list[tuple[str, str, str, dict]] = []
        self.updates: list[tuple[str, str]] = []
        self.closed: list[tuple[str, str, str, bool]] = []

    def incident_opened(self, incident_id, title, summary, fields):
        self.opened.append((incident_id, title, summary, fields))

    def incident_update(self, incident_id, text):
        self.updates.append((incident_id, text))

    def incident_closed(self, incident_id, outcome, summary, escalate):
        self.closed.append((incident_id, outcome, summary, escalate))


def playbook_yaml(name: str, steps: list[str], priority: int = 50, extra: str = "") -> str:
    return (f"name: {name}\ndescription: test playbook {name}\npriority: {priority}\n"
            f"match:\n  exit:\n    codes: [1]\nlimits:\n  max_attempts: 3\n{extra}actions:\n" + "".join(steps))


def run_step(argv: list[str], on_failure: str | None = None) -> str:
    return f"  - run:\n      argv: {json.dumps(argv)}\n" + (f"    on_failure: {on_failure}\n" if on_failure else "")


def record_step(note: str) -> str:
    return f"  - record:\n      note: {json.dumps(note)}\n"


class Project:
    """A project folder with the shipped run config, only this test's playbooks, and a Supervisor over it."""

    def __init__(self, root: Path, playbooks: dict[str, str]):
        (root / "configs").mkdir(parents=True)
        config = (REPO / "configs" / "run_config.yaml").read_text()
        (root / "configs" / "run_config.yaml").write_text(config.replace("  shipped: true", "  shipped: false"))
        (root / "playbooks").mkdir()
        for name, text in playbooks.items():
            (root / "playbooks" / f"{name}.yaml").write_text(text)
        self.root = root
        self.loaded = load_config(root / "configs" / "run_config.yaml")
        self.playbooks = load_playbooks([root / "playbooks"])
        self.notices = Notices()
        self.events: list[tuple[str, dict]] = []
        self.supervisor = Supervisor(self.loaded, self.playbooks, self.notices, "sha256:" + "0" * 64,
                                     events=lambda kind, **data: self.events.append((kind, data)))
        self.runner = self.supervisor.incidents
        self.history = AttemptHistory()

    def decision(self, snap: StateSnapshot) -> Decision:
        outcome = decide(snap, self.loaded.config, self.playbooks, MatchMemory(), self.history)
        assert outcome.decision is not None, outcome
        return outcome.decision

    def handle(self, snap: StateSnapshot, attempt: int = 1):
        return self.runner.handle(self.decision(snap), snap, attempt, self.loaded.config)

    def journal(self) -> list[dict]:
        """The journal's entries, as written on disk."""
        return [json.loads(line) for line in self.loaded.folder.journal.read_text().splitlines() if line.strip()]

    def stored(self, incident_id: str) -> dict:
        return self.supervisor.context.store.read(incident_id).to_json()

    def run_log(self) -> str:
        return self.loaded.run_log.read_text() if self.loaded.run_log.exists() else ""


def snapshot(code: int = 1, tail: list[str] | None = None, step: int | None = 31, when: float | None = None) -> StateSnapshot:
    return StateSnapshot.model_validate({
        "observation": 120, "time": when if when is not None else time.time(), "run_state": "running",
        "trainer": {"pid": 4242, "alive": False, "exit_code": code, "launches": 1},
        "metrics": {"step": step, "iter_num": 124, "tokens": 31744, "loss": 4.8},
        "tail": tail if tail is not None else ["Traceback (most recent call last):", '  File "train.py", line 3',
                                               "ValueError: bad batch 7"],
        "disk": {"free_bytes": 50_000_000_000, "total_bytes": 100_000_000_000},
        "checkpoints": {"count": 0},
    })


# --- on_failure (docs/playbooks.md, "Actions") ----------------------------------------------------------


def test_a_failing_step_with_on_failure_escalate_escalates_the_incident(tmp_path):
    project = Project(tmp_path, {"crash": playbook_yaml("crash", [
        run_step(FAILING, "escalate"), record_step("never reached")])})
    assert project.playbooks[0].actions[0].on_failure == "escalate"   # the loader kept the step's on_failure

    incident = project.handle(snapshot())

    assert incident.outcome == "escalated"
    assert [(a.verb, a.ok) for a in incident.actions] == [("run", False)]   # the step after it never ran
    assert incident.actions[0].summary.startswith(f"{FAILING[0]} exited 3")
    assert "disk check: 3 bad sectors" in incident.actions[0].summary
    reason = f"run failed: {incident.actions[0].summary}"
    assert incident.escalation_reason == reason
    assert "never reached" not in incident.notes
    assert project.runner.escalation == reason
    assert project.supervisor.state is RunState.ESCALATED
    # what was stored and journaled says the same
    stored = project.stored(incident.id)
    assert stored["outcome"] == "escalated" and stored["escalation_reason"] == reason
    journal = project.journal()
    assert [(e["incident"], e["index"], e["ok"]) for e in journal if e["kind"] == "action_done"] == [(incident.id, 0, False)]
    assert [e["outcome"] for e in journal if e["kind"] == "incident_closed"] == ["escalated"]
    transitions = [e for e in journal if e["kind"] == "transition"]
    assert transitions[-1]["to"] == RunState.ESCALATED.value and transitions[-1]["reason"] == reason
    # the person is paged: the notifier's close escalates
    assert project.notices.closed == [(incident.id, "escalated", f"escalated: run: {incident.actions[0].summary}", True)]
    assert incident.id in project.run_log() and "escalated" in project.run_log()


def test_a_failing_step_without_on_failure_aborts_the_recovery_as_failed(tmp_path):
    """The default, `abort`: the recovery stops at the failed step; the incident fails (it is not an escalation
    by the step, but the run is left to a person all the same)."""
    project = Project(tmp_path, {"crash": playbook_yaml("crash", [run_step(FAILING), record_step("never reached")])})
    assert project.playbooks[0].actions[0].on_failure == "abort"

    incident = project.handle(snapshot())

    assert incident.outcome == "failed"
    assert [(a.verb, a.ok) for a in incident.actions] == [("run", False)]
    assert incident.escalation_reason == f"{incident.id}: recovery aborted at a failed action"
    assert not incident.escalation_reason.startswith("run failed")
    assert project.supervisor.state is RunState.ESCALATED
    assert project.stored(incident.id)["outcome"] == "failed"
    assert project.notices.closed[-1][:2] == (incident.id, "failed") and project.notices.closed[-1][3] is True


def test_a_failing_step_with_on_failure_continue_goes_on_and_recovers(tmp_path):
    project = Project(tmp_path, {"crash": playbook_yaml("crash", [
        run_step(FAILING, "continue"), record_step("went on after the failed check")])})

    incident = project.handle(snapshot())

    assert incident.outcome == "recovered"
    assert [(a.verb, a.ok) for a in incident.actions] == [("run", False), ("record", True)]
    assert "went on after the failed check" in incident.notes
    assert incident.escalation_reason is None and project.runner.escalation is None
    assert project.supervisor.state is RunState.RUNNING
    assert project.notices.closed == [(incident.id, "recovered", project.notices.closed[0][2], False)]


def test_on_failure_escalate_does_nothing_when_the_step_succeeds(tmp_path):
    project = Project(tmp_path, {"crash": playbook_yaml("crash", [
        run_step(PASSING, "escalate"), record_step("after the check")])})

    incident = project.handle(snapshot())

    assert incident.outcome == "recovered"
    assert [(a.verb, a.ok) for a in incident.actions] == [("run", True), ("record", True)]
    assert incident.escalation_reason is None
