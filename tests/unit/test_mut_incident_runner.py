"""The incident runner (engine/watch/incident_runner.py) with real parts: a project folder in tmp_path, the
run config the repository ships, playbooks written as YAML and read by the real loader, the real matcher's
decision and the real Supervisor's context (journal, incident store, run log). The trainer is never launched:
each incident is the answer to a recorded snapshot of a trainer that exited."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from engine.core.events import ActionTraceback, WatchEvent
from engine.core.notifier import IncidentLabels, NullNotifier
from engine.core.state import RunPhase, StateSnapshot
from engine.language.planner import plan
from engine.language.playbook import unclaimed_failure_playbook
from engine.observe.events import Progress
from engine.records.incident import Incident
from engine.language.loader import load_playbooks
from engine.language.matcher import AttemptHistory, Decision, MatchMemory, decide
from engine.trainers.run_config import load_config
from engine.watch.incident_runner import signature_fields
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
        self.labels: list[tuple[str, IncidentLabels | None]] = []   # what the receivers' routes match on

    def incident_opened(self, incident_id, title, summary, fields, labels=None):
        self.opened.append((incident_id, title, summary, fields))
        self.labels.append(("opened", labels))

    def incident_update(self, incident_id, text):
        self.updates.append((incident_id, text))

    def incident_closed(self, incident_id, outcome, summary, escalate, labels=None):
        self.closed.append((incident_id, outcome, summary, escalate))
        self.labels.append(("closed", labels))


def playbook_yaml(name: str, steps: list[str], priority: int = 50, extra: str = "") -> str:
    return (f"name: {name}\ndescription: test playbook {name}\npriority: {priority}\n"
            f"match:\n  exit:\n    codes: [1]\nlimits:\n  max_attempts: 3\n{extra}actions:\n" + "".join(steps))


def run_step(argv: list[str], on_failure: str | None = None) -> str:
    return f"  - run:\n      argv: {json.dumps(argv)}\n" + (f"    on_failure: {on_failure}\n" if on_failure else "")


def record_step(note: str) -> str:
    return f"  - record:\n      note: {json.dumps(note)}\n"


class Project:
    """A project folder (a kind-script trainer whose command is `trainer`, only this test's playbooks) and a
    Supervisor over it."""

    def __init__(self, root: Path, playbooks: dict[str, str], trainer: str = "pass", notices: Notices | None = None):
        (root / "configs").mkdir(parents=True)
        for name in ("train", "val"):
            (root / "data" / name).mkdir(parents=True)
        config = {
            "micro_batch_size": 4, "batch_size": 8, "lr": 0.003, "save_interval": 4, "keep_last_k": 3, "seed": 7,
            "max_tokens": 24 * 8 * 32, "out_dir": "checkpoints/pretrain", "run_log": "docs/run-log.md",
            "run_dir": "runs/pretrain", "model": {"block_size": 32},
            "data": {"train_dir": "data/train", "val_dir": "data/val", "tokenizer_dir": "data/tokenizer",
                     "make_default": False},
            "trainer": {"kind": "script", "device": "cpu", "preflight_parse": False,
                        "command": ["{python}", "-c", trainer]},
            "watch": {"poll_interval_s": 0.2, "hang_timeout_s": 60, "grace_period_s": 2},
            "playbooks": {"paths": ["playbooks"], "shipped": False},
        }
        (root / "configs" / "run_config.yaml").write_text(json.dumps(config, indent=1))   # JSON is YAML
        (root / "playbooks").mkdir()
        for name, text in playbooks.items():
            (root / "playbooks" / f"{name}.yaml").write_text(text)
        self.root = root
        self.loaded = load_config(root / "configs" / "run_config.yaml")
        self.playbooks = load_playbooks([root / "playbooks"])
        self.notices = notices or Notices()
        self.events: list[WatchEvent] = []
        self.supervisor = Supervisor(self.loaded, self.playbooks, self.notices, "sha256:" + "0" * 64,
                                     events=self.events.append)
        self.runner = self.supervisor.incidents
        self.history = AttemptHistory()

    def decision(self, snap: StateSnapshot) -> Decision:
        outcome = decide(snap, self.loaded.config, self.playbooks, MatchMemory(), self.history)
        assert outcome.decision is not None, outcome
        return outcome.decision

    def handle(self, snap: StateSnapshot, attempt: int = 1):
        return self.runner.handle(self.decision(snap), snap, attempt, self.supervisor.loaded.config)

    def journal(self, kind: str | None = None) -> list[dict]:
        """The journal's entries (of one kind), as written on disk."""
        entries = [json.loads(line) for line in self.loaded.folder.journal.read_text().splitlines() if line.strip()]
        return [e for e in entries if kind is None or e["kind"] == kind]

    def stored(self, incident_id: str) -> dict:
        return self.supervisor.parts.store.read(incident_id).to_json()

    def run_log(self) -> str:
        return self.loaded.run_log.read_text() if self.loaded.run_log.exists() else ""

    def close(self) -> None:
        """Stop a trainer a launch left running."""
        if self.supervisor.control.alive:
            self.supervisor.control.stop("test over")


@pytest.fixture
def projects(tmp_path):
    made: list[Project] = []

    def make(playbooks: dict[str, str], trainer: str = "pass", notices: Notices | None = None) -> Project:
        made.append(Project(tmp_path / f"p{len(made)}", playbooks, trainer, notices))
        return made[-1]

    yield make
    for project in made:
        project.close()


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


def test_a_failing_step_with_on_failure_escalate_escalates_the_incident(projects):
    project = projects({"crash": playbook_yaml("crash", [
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
    assert project.supervisor.phase is RunPhase.ESCALATED
    # what was stored and journaled says the same
    stored = project.stored(incident.id)
    assert stored["outcome"] == "escalated" and stored["escalation_reason"] == reason
    journal = project.journal()
    assert [(e["incident"], e["index"], e["ok"]) for e in journal if e["kind"] == "action_done"] == [(incident.id, 0, False)]
    assert [e["outcome"] for e in journal if e["kind"] == "incident_closed"] == ["escalated"]
    transitions = [e for e in journal if e["kind"] == "transition"]
    assert transitions[-1]["to"] == RunPhase.ESCALATED.value and transitions[-1]["reason"] == reason
    # the person is paged: the notifier's close escalates
    assert project.notices.closed == [(incident.id, "escalated", f"escalated: run: {incident.actions[0].summary}", True)]
    assert incident.id in project.run_log() and "escalated" in project.run_log()


def test_a_failing_step_without_on_failure_aborts_the_recovery_as_failed(projects):
    """The default, `abort`: the recovery stops at the failed step; the incident fails (it is not an escalation
    by the step, but the run is left to a person all the same)."""
    project = projects({"crash": playbook_yaml("crash", [run_step(FAILING), record_step("never reached")])})
    assert project.playbooks[0].actions[0].on_failure == "abort"

    incident = project.handle(snapshot())

    assert incident.outcome == "failed"
    assert [(a.verb, a.ok) for a in incident.actions] == [("run", False)]
    assert incident.escalation_reason == f"{incident.id}: recovery aborted at a failed action"
    assert not incident.escalation_reason.startswith("run failed")
    assert project.supervisor.phase is RunPhase.ESCALATED
    assert project.stored(incident.id)["outcome"] == "failed"
    assert project.notices.closed[-1][:2] == (incident.id, "failed") and project.notices.closed[-1][3] is True


def test_a_failing_step_with_on_failure_continue_goes_on_and_recovers(projects):
    project = projects({"crash": playbook_yaml("crash", [
        run_step(FAILING, "continue"), record_step("went on after the failed check")])})

    incident = project.handle(snapshot())

    assert incident.outcome == "recovered"
    assert [(a.verb, a.ok) for a in incident.actions] == [("run", False), ("record", True)]
    assert "went on after the failed check" in incident.notes
    assert incident.escalation_reason is None and project.runner.escalation is None
    assert project.supervisor.phase is RunPhase.RUNNING
    assert project.notices.closed == [(incident.id, "recovered", project.notices.closed[0][2], False)]


def test_on_failure_escalate_does_nothing_when_the_step_succeeds(projects):
    project = projects({"crash": playbook_yaml("crash", [
        run_step(PASSING, "escalate"), record_step("after the check")])})

    incident = project.handle(snapshot())

    assert incident.outcome == "recovered"
    assert [(a.verb, a.ok) for a in incident.actions] == [("run", True), ("record", True)]
    assert incident.escalation_reason is None


# --- a recovery that relaunched: reported at the relaunch's first progress, or judged when it fails again ----


RESUME = "  - resume:\n      from: newest_verified\n"


def progress(project: Project, step: int, now: float) -> None:
    """One progress line of the relaunched trainer, as the observer hands it to its tracker."""
    project.supervisor.observer.tracker.on_event(Progress(iter_num=step * 2, step=step, loss=3.0, iter_time_ms=50.0,
                                                          is_step=True), now)


def test_a_recovery_that_relaunched_is_reported_at_the_first_progress_of_the_relaunch(projects):
    project = projects({"crash": playbook_yaml("crash", [RESUME])})
    incident = project.handle(snapshot(step=31))

    assert incident.outcome == "recovered" and incident.actions[0].summary == "relaunched trainer from scratch (no verified checkpoint)"
    assert project.runner.awaiting_progress is incident
    assert project.notices.closed == [] and incident.id not in project.run_log()   # not reported yet
    tracker = project.supervisor.observer.tracker
    project.runner.check_progress(tracker)                  # the relaunch has printed nothing yet
    assert project.runner.awaiting_progress is incident and project.notices.closed == []

    progress(project, 1, now=incident.closed_at + 4.0)      # its first progress line
    project.runner.check_progress(tracker)

    assert project.runner.awaiting_progress is None
    assert incident.first_progress_at == incident.closed_at + 4.0
    assert project.stored(incident.id)["first_progress_at"] == incident.first_progress_at
    # from scratch: the 31 steps trained before the failure are lost, and the closing notice says so
    assert project.notices.closed == [(incident.id, "recovered",
                                       f"recovered: resume: {incident.actions[0].summary} (lost 31 steps)", False)]
    assert incident.id in project.run_log()
    project.runner.check_progress(tracker)                  # reported once
    assert len(project.notices.closed) == 1
    assert [e["incident"] for e in project.journal("incident_reported")] == [incident.id]


def test_a_recovery_without_a_relaunch_is_reported_when_it_closes(projects):
    project = projects({"crash": playbook_yaml("crash", [record_step("looked at it")])})
    incident = project.handle(snapshot())
    assert incident.outcome == "recovered" and project.runner.awaiting_progress is None
    assert project.notices.closed == [(incident.id, "recovered", "recovered: record: recorded", False)]
    assert [e["awaits_report"] for e in project.journal("incident_closed")] == [True]
    assert project.journal("transition")[-1]["reason"] == f"{incident.id} recovered"


def test_the_same_failure_before_any_progress_means_the_recovery_did_not_work(projects):
    project = projects({"crash": playbook_yaml("crash", [RESUME])})
    first = project.handle(snapshot())
    assert project.runner.awaiting_progress is first

    second = project.handle(snapshot())                       # the same playbook again, before any progress

    assert first.outcome == "failed" and project.stored(first.id)["outcome"] == "failed"
    assert "not recovered: the trainer failed again before making progress" in first.notes
    # reported, not paged: its relaunch failed, and the second incident carries on
    assert project.notices.closed == [(first.id, "failed", project.notices.closed[0][2], False)]
    assert project.runner.awaiting_progress is second


def test_another_failure_before_any_progress_leaves_the_recovery_standing(projects):
    project = projects({"crash": playbook_yaml("crash", [RESUME]),
                        "other": playbook_yaml("other", [RESUME]).replace("codes: [1]", "codes: [2]")})
    first = project.handle(snapshot(code=1))
    assert first.playbook == "crash"

    second = project.handle(snapshot(code=2))

    assert second.playbook == "other"
    assert first.outcome == "recovered" and project.stored(first.id)["outcome"] == "recovered"
    assert "the trainer failed again before making progress" in first.notes
    assert not any(note.startswith("not recovered") for note in first.notes)
    assert project.notices.closed[0][:2] == (first.id, "recovered")


def test_a_remedy_whose_relaunch_died_of_another_failure_is_reverted_and_the_resume_retried(projects):
    remedy = ["  - set_env:\n      vars: {RUNBOOK_TEST_FLAG: \"1\"}\n",
              "  - set_hyperparameters:\n      micro_batch_size: 2\n", RESUME]
    project = projects({"crash": playbook_yaml("crash", remedy),
                        "other": playbook_yaml("other", [record_step("other")]).replace("codes: [1]", "codes: [2]")})
    control = project.supervisor.control
    culprit = project.handle(snapshot(code=1))
    assert culprit.outcome == "recovered" and control.env_in_force() == {"RUNBOOK_TEST_FLAG": "1"}
    assert project.supervisor.loaded.config.micro_batch_size == 2

    incident = project.handle(snapshot(code=2))                # the remedy's relaunch died of something else

    assert culprit.outcome == "failed" and culprit.reverted.startswith("reverted RUNBOOK_TEST_FLAG=1 (was unset), "
                                                                        "micro_batch_size 2 (was 4): the next launch died")
    assert project.stored(culprit.id)["reverted"] == culprit.reverted
    assert control.env_in_force() == {} and project.supervisor.loaded.config.micro_batch_size == 4
    assert incident.id != culprit.id and incident.playbook == "other"
    assert [(p["index"], p["verb"], p["params"], p["on_failure"]) for p in incident.plan] == [
        (0, "resume", {"from": "newest_verified", "step": None}, "abort")]   # the stored plan: the retry alone
    assert [(a.index, a.verb, a.ok) for a in incident.actions] == [(0, "resume", True)]
    assert incident.outcome == "recovered" and project.runner.awaiting_progress is incident
    assert any(note.startswith(f"attributed to {culprit.id}'s remedy") for note in incident.notes)
    assert [e["incident"] for e in project.journal("remedy_reverted")] == [culprit.id]
    assert [(e["incident"], e["index"]) for e in project.journal("action_done")][-1] == (incident.id, 0)
    assert "other" not in incident.notes                       # the other playbook's own steps did not run


# --- escalation without a recovery ---------------------------------------------------------------------


def test_an_unclaimed_failure_is_escalated_without_running_a_step(projects):
    project = projects({"crash": playbook_yaml("crash", [record_step("never")])})

    incident = project.runner.escalate_unclaimed(snapshot(code=7), project.supervisor.loaded.config)

    reason = "trainer exited with 7 and no playbook matched"
    assert incident.outcome == "escalated" and incident.decision == "escalate" and incident.actions == []
    assert incident.playbook == unclaimed_failure_playbook(7).name and incident.attempt == 1
    assert incident.escalation_reason == reason and project.runner.escalation == reason
    assert project.stored(incident.id)["outcome"] == "escalated"
    assert project.supervisor.phase is RunPhase.ESCALATED
    assert project.notices.closed == [(incident.id, "escalated", "escalated: no action", True)]
    labels = IncidentLabels("critical", unclaimed_failure_playbook(7).name)   # the receivers route on these
    assert project.notices.labels == [("opened", labels), ("closed", labels)]


# --- repeats ---------------------------------------------------------------------------------------------


def test_a_repeat_of_an_earlier_failure_names_the_first_incident_with_its_signature(projects):
    project = projects({"crash": playbook_yaml("crash", [record_step("seen")])})
    first = project.handle(snapshot())
    other = project.handle(snapshot(tail=["RuntimeError: CUDA error: an illegal memory access"]))
    again = project.handle(snapshot(tail=["Traceback (most recent call last):", "ValueError: bad batch 12"]))

    assert first.same_as is None and other.same_as is None
    assert again.same_as == first.id and project.stored(again.id)["same_as"] == first.id
    fields = {incident_id: f for incident_id, _, _, f in project.notices.opened}
    assert "seen before" not in fields[first.id]
    assert fields[again.id]["seen before"] == f"the same failure as {first.id}"
    assert fields[again.id]["signature"] == f"{again.signature.id}: {again.signature.text}"
    assert signature_fields(again) == {"signature": fields[again.id]["signature"],
                                       "seen before": f"the same failure as {first.id}"}
    assert signature_fields(again.model_copy(update={"signature": None})) == {}


# --- a watcher restarted mid-recovery ----------------------------------------------------------------------


def open_incident(project: Project, steps: list | None = None):
    """An incident opened and stored as the runner stores it, whose watcher died before it closed."""
    snap = snapshot()
    decision = project.decision(snap)
    config = project.supervisor.loaded.config
    planned = plan(decision.playbook, snap, config, 1) if steps is None else steps
    incident = Incident.open(project.supervisor.parts.store.next_id(), decision.playbook, decision, snap, 1,
                             [s.to_dict() for s in planned], config.model_dump(mode="json"))
    project.supervisor.parts.store.write(incident)
    return incident


def test_a_restarted_watcher_continues_the_open_incident_after_its_done_steps(projects):
    project = projects({"crash": playbook_yaml("crash", [record_step("first"), record_step("second"),
                                                         record_step("third")])})
    opened = open_incident(project)

    incident = project.runner.continue_open({"incident": opened.id}, [0, 1], project.playbooks)

    assert incident.id == opened.id and incident.outcome == "recovered"
    assert [a.index for a in incident.actions] == [2]
    assert "first" not in incident.notes and "third" in incident.notes
    assert "the watcher restarted during this recovery and continued it" in incident.notes
    assert project.stored(opened.id)["outcome"] == "recovered"


def test_a_restarted_watcher_plans_again_an_open_incident_stored_without_its_plan(projects):
    project = projects({"crash": playbook_yaml("crash", [record_step("first"), record_step("second")])})
    opened = open_incident(project, steps=[])

    incident = project.runner.continue_open({"incident": opened.id}, [], project.playbooks)

    assert incident.outcome == "recovered" and [a.index for a in incident.actions] == [0, 1]
    assert "first" in incident.notes and "second" in incident.notes


def test_an_open_incident_whose_playbook_is_gone_is_escalated(projects):
    project = projects({"crash": playbook_yaml("crash", [record_step("first")])})
    opened = open_incident(project, steps=[])

    incident = project.runner.continue_open({"incident": opened.id}, [], [])

    reason = f"playbook 'crash' of the open {opened.id} no longer exists"
    assert incident.outcome == "escalated" and incident.actions == []
    assert incident.escalation_reason == reason and project.runner.escalation == reason
    assert project.stored(opened.id)["outcome"] == "escalated"


def test_an_open_record_the_journal_does_not_know_is_adopted_once(projects):
    project = projects({"crash": playbook_yaml("crash", [record_step("first")])})
    opened = open_incident(project)

    assert project.runner.adopt_unjournaled([opened.id]) is None       # the journal knows it
    entry = project.runner.adopt_unjournaled([])

    assert entry is not None and entry["kind"] == "incident_opened" and entry["incident"] == opened.id
    assert entry["adopted"] is True and entry["playbook"] == "crash" and entry["decision"] == "recover"
    assert [e["incident"] for e in project.journal("incident_opened") if e.get("adopted")] == [opened.id]


def test_a_closed_record_is_not_adopted(projects):
    project = projects({"crash": playbook_yaml("crash", [record_step("first")])})
    closed = project.handle(snapshot())
    assert project.runner.adopt_unjournaled([]) is None
    assert [e["incident"] for e in project.journal("incident_opened")] == [closed.id]


def test_closed_incidents_a_killed_watcher_had_not_reported_are_reported(projects):
    project = projects({"crash": playbook_yaml("crash", [record_step("first")])})
    incident = project.handle(snapshot())
    project.notices.closed.clear()

    project.runner.report_unreported([incident.id])

    assert project.notices.closed == [(incident.id, "recovered", "recovered: record: recorded", False)]


# --- each step's record ---------------------------------------------------------------------------------


class FailingSlack(Notices):
    """A notifier whose thread update fails for one text (a network error reaching Slack)."""

    def incident_update(self, incident_id, text):
        if text == "page the on-call":
            raise ConnectionError("slack unreachable")
        super().incident_update(incident_id, text)


def test_each_step_is_recorded_as_it_ended(projects):
    project = projects({"crash": playbook_yaml("crash", [
        record_step("always"),
        "  - record:\n      note: only on a retry\n    if: \"attempt >= 2\"\n",
        "  - set_hyperparameters:\n      micro_batch_size: \"{{ config.micro_batch_size // 0 }}\"\n    on_failure: continue\n",
        "  - notify:\n      text: page the on-call\n    on_failure: continue\n",
        run_step(PASSING), run_step(PASSING), run_step(PASSING)])}, notices=FailingSlack())

    incident = project.handle(snapshot())

    noted, skipped, unplanned, notified, *ran = incident.actions
    assert (noted.ok, noted.skipped) == (True, False)
    assert (skipped.ok, skipped.skipped) == (True, True) and skipped.summary.startswith("skipped (")
    assert unplanned.ok is False and unplanned.summary.startswith("could not plan: ")
    assert notified.ok is False and notified.summary == "ConnectionError: slack unreachable"
    assert [type(e) for e in project.events].count(ActionTraceback) == 1
    assert all(a.ok for a in ran) and "only on a retry" not in incident.notes
    # seconds to the millisecond
    assert all(a.seconds is not None and a.seconds == round(a.seconds, 3) for a in ran)
    assert incident.outcome == "recovered"


# --- closing ---------------------------------------------------------------------------------------------


def test_a_failed_recovery_stops_the_trainer_it_relaunched(projects):
    project = projects({"crash": playbook_yaml("crash", [RESUME, run_step(FAILING)])},
                       trainer="import time; time.sleep(60)")
    incident = project.handle(snapshot())

    assert [(a.verb, a.ok) for a in incident.actions] == [("resume", True), ("run", False)]
    assert incident.outcome == "failed"
    assert not project.supervisor.control.alive
    assert any(note.startswith("the run failed, so its trainer was stopped: ") for note in incident.notes)
    stops = project.journal("trainer_noticed") + project.journal("trainer_stopped")
    assert stops and {e["reason"] for e in stops} == {f"{incident.id} failed"}


def test_a_recovered_run_keeps_the_trainer_it_relaunched(projects):
    project = projects({"crash": playbook_yaml("crash", [RESUME])}, trainer="import time; time.sleep(60)")
    incident = project.handle(snapshot())
    assert incident.outcome == "recovered" and project.supervisor.control.alive
    assert project.journal("trainer_noticed") + project.journal("trainer_stopped") == []


def test_a_slowness_incident_whose_trainer_ends_before_the_sample_does_not_escalate_the_run(projects):
    """The shipped slow-training playbook, its trainer gone when the incident starts (a preemption's SIGTERM
    landed between the match and the sample; CI saw one): the diagnosis says it found no trainer, the wait ends
    at once, and the run is not escalated: the loop hands the trainer's end to the playbook that matches it."""
    project = projects({})
    [slow] = load_playbooks([REPO / "playbooks" / "slow_training.yaml"])
    snap = StateSnapshot.model_validate({
        "observation": 40, "time": time.time(), "run_state": "running",
        "trainer": {"pid": 4242, "alive": True, "launches": 1},
        "metrics": {"step": 40, "tokens_per_sec": 5000.0, "baseline_tokens_per_sec": 20000.0}})
    incident = project.runner.handle(Decision("recover", slow, "slow"), snap, 1, project.supervisor.loaded.config)
    assert [(a.verb, a.ok) for a in incident.actions] == [("diagnose_slowness", False), ("notify", True), ("wait_for", False)]
    assert "no live trainer to sample" in incident.actions[0].summary
    assert project.runner.escalation is None and project.supervisor.phase is RunPhase.RUNNING, incident.actions
