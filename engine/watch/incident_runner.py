"""How an incident runs: opened from a decision with its plan (computed once, stored, and the plan that
runs), carried out step by step, closed, and reported to the run log and the notifier.

Every write is ordered so that a watcher killed at any point finishes the same incident exactly
once after a restart: the record is saved before the journal says an action is done, and the
journal is the truth a restarted watcher continues from (engine/records/journal.py). `crash_point` marks
each boundary for the crash tests (engine/core/crash_points.py).
"""

from __future__ import annotations

import json
import traceback
from typing import AbstractSet

from engine.core.events import ActionDone, ActionResult, ActionTraceback, IncidentClosed, IncidentOpened, WatchWarning
from engine.core.crash_points import crash_point
from engine.records.incident import Incident
from engine.language.planner import PlannedStep, plan
from engine.watch.parts import WatchParts
from engine.watch.remedy_guard import change_summary, remedy_to_blame
from engine.watch.stopping import stop_on_request
from engine.core.config import RunConfig
from engine.core.state import RunPhase, StateSnapshot
from engine.language.actions import REGISTRY
from engine.language.actions.base import ActionFailed
from engine.language.actions.ports import ActionPorts, IncidentEffects
from engine.language.matcher import Decision
from engine.language.playbook import Playbook, unclaimed_failure_playbook
from engine.observe.observer import MetricTracker
from engine.records.incident import ActionRecord, Outcome
from engine.records.run_log_entry import relaunch_failed
from engine.records.signature import first_with
from engine.records.signature import repeat_phrase


class IncidentRunner:
    def __init__(self, parts: WatchParts):
        self.parts = parts
        self.escalation: str | None = None
        self.awaiting_progress: Incident | None = None   # recovered, waiting for the first new progress

    # --- opening -------------------------------------------------------------------------------
    def handle(self, decision: Decision, snapshot: StateSnapshot, attempt: int, config: RunConfig) -> Incident:
        """Open an incident for the decision and run its plan to the end."""
        playbook = decision.playbook
        blame = remedy_to_blame(self.awaiting_progress, playbook.name, snapshot)
        if blame is not None:
            return self._revert_and_retry(decision, snapshot, attempt, config, blame)
        steps = plan(playbook, snapshot, config, attempt)
        # The failure it answered came back before any training: that recovery did not work. Another kind of
        # event (a preemption notice, a node lost) says nothing against it.
        again = self.awaiting_progress is not None and self.awaiting_progress.playbook == playbook.name
        self.flush_awaiting("the trainer failed again before making progress", not_recovered=again)
        s = self.parts
        incident = Incident.open(s.store.next_id(), playbook, decision, snapshot, attempt,
                                 [step.to_dict() for step in steps], config.model_dump(mode="json"))
        incident.same_as = self._first_same(incident)
        self._save(incident)
        crash_point("incident-saved")
        s.journal.append("incident_opened", incident=incident.id, playbook=playbook.name, decision=decision.kind,
                         snapshot=incident.snapshot)
        crash_point("incident-opened")
        s.session.transition(RunPhase.INCIDENT, f"{incident.id}: {decision.reason}")
        self.parts.events(IncidentOpened(incident.view(), f"{playbook.name} ({playbook.severity})", playbook.description,
                                       {"step": str(snapshot.metrics.step), "decision": decision.reason,
                                        **signature_fields(incident)}))
        if decision.kind == "escalate":
            self.escalation = decision.reason
            self._close(incident, IncidentEffects(), "escalated")
            return incident
        self._run(incident, steps)
        return incident

    def _revert_and_retry(self, decision: Decision, snapshot: StateSnapshot, attempt: int, config: RunConfig,
                          blame: str) -> Incident:
        """The remedy on probation killed the launch it made (engine/watch/remedy_guard.py): undo it, say so in
        both incidents, and resume once more without it. The new failure is its own incident, recovered so."""
        s = self.parts
        culprit = self.awaiting_progress
        assert culprit is not None   # remedy_to_blame said so
        self.awaiting_progress = None
        what = change_summary(culprit)
        if culprit.env_changes:
            s.control.restore_env({name: before for name, (before, _) in culprit.env_changes.items()}, blame)
        if culprit.config_changes:
            s.control.write_config({key: before for key, (before, _) in culprit.config_changes.items()})
        culprit.reverted = f"reverted {what}: {blame}"
        culprit.outcome = "failed"   # its relaunch never trained: not a recovery
        culprit.note(culprit.reverted)
        self._save(culprit)
        self._report(culprit)
        s.journal.append("remedy_reverted", incident=culprit.id, changes=what, reason=blame)
        retry = PlannedStep.from_dict({"index": 0, "verb": "resume", "description": "resume without the remedy",
                                       "params": {"from": "newest_verified"}, "on_failure": "abort"})
        # The stored plan is the retry alone: a watcher restarted from here resumes, the revert being journaled.
        incident = Incident.open(s.store.next_id(), decision.playbook, decision, snapshot, attempt, [retry.to_dict()],
                                 config.model_dump(mode="json"))
        incident.same_as = self._first_same(incident)
        incident.note(f"attributed to {culprit.id}'s remedy ({what}): {blame}; reverted, and the recovery retried "
                      "once without it")
        self._save(incident)
        s.journal.append("incident_opened", incident=incident.id, playbook=decision.playbook.name,
                         decision="recover", snapshot=incident.snapshot)
        s.session.transition(RunPhase.INCIDENT, f"{incident.id}: {blame}")
        s.events(IncidentOpened(incident.view(), f"{decision.playbook.name} ({decision.playbook.severity})",
                                f"{blame}; reverting {culprit.id}'s remedy ({what}) and resuming without it",
                                {"step": str(snapshot.metrics.step), "decision": "revert the remedy, resume"}))
        s.session.transition(RunPhase.RECOVERING, incident.id)
        ports = self.ports(incident)
        resumed = self._run_step(retry, ports)
        incident.actions.append(resumed)
        self._save(incident)
        s.journal.append("action_done", incident=incident.id, index=retry.index, ok=resumed.ok)
        self._close(incident, ports.effects, "recovered" if resumed.ok else "failed")
        return incident

    def _first_same(self, incident: Incident) -> str | None:
        """The run's first earlier incident with this failure's signature (records that cannot be read are passed over)."""

        if incident.signature is None:
            return None
        try:
            earlier = [i.to_json() for i in self.parts.store.read_all()[0] if i.id != incident.id]
        except OSError:
            return None
        return first_with(incident.signature.id, earlier)

    def continue_open(self, opened: dict, done: list[int], playbooks: list[Playbook]) -> Incident:
        """A watcher died mid-recovery: finish the same incident, from its stored plan."""
        s = self.parts
        incident = s.store.read(opened["incident"])
        incident.note("the watcher restarted during this recovery and continued it")
        # An action whose result reached the record but not the journal ran already: not again.
        skip = set(done) | {a.index for a in incident.actions}
        if incident.plan:
            steps = [PlannedStep.from_dict(d) for d in incident.plan]
        else:   # opened but its record not yet saved with a plan: plan again from the stored snapshot
            playbook = next((p for p in playbooks if p.name == incident.playbook), None)
            if playbook is None:
                self.escalation = f"playbook '{incident.playbook}' of the open {incident.id} no longer exists"
                self._close(incident, IncidentEffects(), "escalated")
                return incident
            steps = plan(playbook, incident.state, self.parts.control.loaded.config, incident.attempt)
        self._run(incident, steps, skip=skip)
        return incident

    def adopt_unjournaled(self, known: list[str]) -> dict | None:
        """A watcher killed between saving a new record and journaling its opening left an open record
        the journal does not know: journal it now, so it is continued rather than opened twice."""
        s = self.parts
        for incident_id in reversed(s.store.ids()):
            if incident_id in known:
                return None
            incident = s.store.read(incident_id)
            if incident.outcome == "open":
                return s.journal.append("incident_opened", incident=incident.id, playbook=incident.playbook,
                                        decision=incident.decision, snapshot=incident.snapshot, adopted=True)
        return None

    def report_unreported(self, incident_ids: list[str]) -> None:
        """Closed incidents a killed watcher had not yet reported (run log, notifier): report them now."""
        for incident_id in incident_ids:
            self._report(self.parts.store.read(incident_id))

    def escalate_unclaimed(self, snapshot: StateSnapshot, config: RunConfig) -> Incident:
        code = snapshot.trainer.exit_code
        fallback = unclaimed_failure_playbook(code)
        decision = Decision("escalate", fallback, f"trainer exited with {code} and no playbook matched")
        return self.handle(decision, snapshot, 1, config)

    # --- running -------------------------------------------------------------------------------
    def _run(self, incident: Incident, steps: list[PlannedStep], skip: AbstractSet[int] = frozenset()) -> None:
        s = self.parts
        s.session.transition(RunPhase.RECOVERING, incident.id)
        ports = self.ports(incident)
        effects = ports.effects
        aborted = None
        for step in steps:
            if step.index in skip:
                continue
            crash_point(f"before-action-{step.index}")
            result = self._run_step(step, ports)
            incident.actions.append(result)
            crash_point(f"after-action-{step.index}")
            self._save(incident)
            crash_point(f"saved-action-{step.index}")
            s.journal.append("action_done", incident=incident.id, index=step.index, ok=result.ok)
            crash_point(f"journaled-action-{step.index}")
            self.parts.events(ActionDone(incident.view(), ActionResult(result.verb, result.ok, result.summary)))
            if effects.escalated_reason:
                break
            if not result.ok and step.on_failure != "continue":
                aborted = step.on_failure
                if aborted == "escalate":
                    effects.escalated_reason = f"{step.verb} failed: {result.summary}"
                break
        outcome: Outcome
        if effects.escalated_reason:
            self.escalation = effects.escalated_reason
            outcome = "escalated"
        elif aborted:
            outcome = "failed"
            self.escalation = f"{incident.id}: recovery aborted at a failed action"
        else:
            outcome = "recovered"
        self._close(incident, effects, outcome)

    def ports(self, incident: Incident) -> ActionPorts:
        """The typed ports the actions of one incident act through (engine/language/actions/ports.py)."""
        s = self.parts
        return ActionPorts(incident, s.control, s.catalog, s.journal, s.notifier, s.session, s.events)

    def _run_step(self, step: PlannedStep, ports: ActionPorts) -> ActionRecord:
        import time


        started = time.time()
        base = {"index": step.index, "verb": step.verb, "description": step.description}
        if step.skipped:
            return ActionRecord(**base, ok=True, skipped=True, summary=f"skipped ({step.skipped})")
        if step.error:
            return ActionRecord(**base, ok=False, summary=f"could not plan: {step.error}")
        try:
            result = REGISTRY[step.verb].apply(step.params, ports)
            ok, summary = result.ok, result.summary
        except ActionFailed as err:
            ok, summary = False, str(err)
        except Exception as err:  # noqa: BLE001 - a failing action is recorded, never crashes the watcher
            ok, summary = False, f"{type(err).__name__}: {err}"
            self.parts.events(ActionTraceback(traceback.format_exc()))
        return ActionRecord(**base, ok=ok, summary=summary, seconds=round(time.time() - started, 3))

    # --- closing and reporting -----------------------------------------------------------------
    def _close(self, incident: Incident, effects: IncidentEffects, outcome: Outcome) -> None:
        s = self.parts
        if outcome != "recovered" and s.control.alive:   # nobody supervises it from here on: stop it (stopping.py)
            detail = stop_on_request(f"{incident.id} {outcome}", s.control, s.journal, s.catalog)
            incident.note(f"the run {outcome}, so its trainer was stopped: {detail}")
        incident.close(outcome, self.parts.control.loaded.config.model_dump(mode="json"), s.tokens_per_step,
                       self.escalation)
        self._save(incident)
        crash_point("incident-closing")
        s.journal.append("incident_closed", incident=incident.id, outcome=outcome, awaits_report=True)
        crash_point("incident-closed")
        if outcome == "recovered":
            s.session.transition(RunPhase.RUNNING, f"{incident.id} recovered")
        else:
            s.session.transition(RunPhase.ESCALATED, self.escalation or outcome)
        if outcome == "recovered" and effects.resumed:
            self.awaiting_progress = incident   # reported once the trainer makes progress again
        else:
            self._report(incident)

    def check_progress(self, tracker: MetricTracker) -> None:
        incident = self.awaiting_progress
        if incident is None:
            return
        if tracker.progress_since_launch > 0 and tracker.last_progress_time is not None:
            incident.first_progress(tracker.last_progress_time)
            if incident.data_skipped is not None and tracker.data_skip_reports:
                # what the relaunch said it left out (dataset rows, a loader's samples, files): the skip as done
                incident.data_skipped = {**incident.data_skipped, "trainer_reports": list(tracker.data_skip_reports)}
            self._save(incident)
            self.awaiting_progress = None
            self._report(incident)

    def flush_awaiting(self, why: str, not_recovered: bool = False) -> None:
        """Report the incident whose relaunch has not trained yet. not_recovered: it failed again before training,
        so its recovery did not work: "recovered" means the trainer progressed again (issue 44 item 7)."""
        if self.awaiting_progress is not None:
            incident, self.awaiting_progress = self.awaiting_progress, None
            if not_recovered:
                incident.outcome = "failed"
                why = f"not recovered: {why}"
            incident.note(why)
            self._save(incident)
            self._report(incident)

    def _report(self, incident: Incident) -> None:
        """The close on the bus, once the outcome is known, carrying the whole record: its listeners write the
        run-log entry first (engine/records/held_writes.py), then send the notice and print the line;
        journaled as reported only after all of them (a killed watcher reports it again)."""
        record = incident.to_json()
        self.parts.events(IncidentClosed(incident.view(), closing_summary(incident),
                                       escalate=incident.outcome != "recovered" and not relaunch_failed(record),
                                       record_json=json.dumps(record)))
        self.parts.journal.append("incident_reported", incident=incident.id)

    def _save(self, incident: Incident) -> None:
        """Write the record atomically; on a full disk keep it in memory and try again at the next
        save (a disk-full recovery makes space first), never leaving half a file."""
        try:
            self.parts.store.write(incident)
        except OSError as error:
            self.parts.events(WatchWarning(f"could not write {incident.id} yet ({error.strerror}); will retry"))


def signature_fields(incident: Incident) -> dict[str, str]:
    """The notice's signature fields: the failure in one line, and which earlier incident it repeats."""
    if incident.signature is None:
        return {}
    fields = {"signature": f"{incident.signature.id}: {incident.signature.text}"}
    if incident.same_as:
        fields["seen before"] = repeat_phrase(incident.playbook, incident.same_as)
    return fields


def closing_summary(incident: Incident) -> str:
    actions = "; ".join(f"{a.verb}: {a.summary}" for a in incident.actions) or "no action"
    lost = incident.steps_lost
    return f"{incident.outcome}: {actions}" + (f" (lost {lost} steps)" if lost is not None else "")


__all__ = ["IncidentRunner", "closing_summary", "signature_fields"]
