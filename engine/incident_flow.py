"""How an incident runs: opened from a decision, its plan carried out step by step, closed, reported.

A mixin of the Supervisor (it uses the Supervisor's journal, incident store, notifier and effects):
kept apart so the watch loop in supervisor.py reads top to bottom.
"""

from __future__ import annotations

import datetime as dt
import time
import traceback

from engine.planner import plan
from engine.runtime import EngineRuntime
from engine.state import RunState


class IncidentHandling:
    def _continue_incident(self, opened: dict, done: list[int]) -> None:
        """A watcher died mid-recovery: finish the same incident instead of opening a second one."""
        from engine.state import StateSnapshot

        playbook = next((p for p in self.playbooks if p.name == opened["playbook"]), None)
        snapshot = StateSnapshot.model_validate(opened["snapshot"])
        record = self.incidents.load(opened["incident"])
        record["snapshot_model"] = snapshot
        record.setdefault("notes", []).append("the watcher restarted during this recovery and continued it")
        if playbook is None:
            self.escalation = f"playbook '{opened['playbook']}' of the open {opened['incident']} no longer exists"
            self._close_incident(record, EngineRuntime(self, record), "escalated")
            return
        self._apply(record, playbook, snapshot, skip=set(done))

    # --- incidents -----------------------------------------------------------------------------
    def handle_incident(self, decision, snapshot) -> None:
        playbook = decision.playbook
        steps = plan(playbook, snapshot, self.loaded.config, self._attempt(playbook))
        self._flush_awaiting("the trainer failed again before making progress")
        incident_id = self.incidents.next_id()
        record = {
            "id": incident_id,
            "playbook": playbook.name,
            "playbook_hash": playbook.content_hash,
            "playbook_source": playbook.source,
            "severity": playbook.severity,
            "symptom": playbook.description,
            "lesson": playbook.lesson,
            "decision": decision.kind,
            "attempt": self._attempt(playbook),
            "decision_reason": decision.reason,
            "matched": list(decision.matched),
            "inhibited": list(decision.inhibited),
            "detected_at": snapshot.time,
            "opened_at": time.time(),
            "opened_at_iso": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "step_at_failure": snapshot.metrics.step,
            "tokens_at_failure": snapshot.metrics.tokens,
            "trainer_exit_code": snapshot.trainer.exit_code,
            "log_excerpt": snapshot.tail[-40:],
            "snapshot": snapshot.model_dump(mode="json"),
            "plan": [s.to_dict() for s in steps],
            "config_before": self.loaded.config.model_dump(mode="json"),
            "actions": [],
            "outcome": "open",
        }
        self._save_record(record)
        self.journal.append("incident_opened", incident=incident_id, playbook=playbook.name, decision=decision.kind,
                            snapshot=record["snapshot"])
        self.history = self.journal.replay().history  # limits count this firing from now on
        self._transition(RunState.INCIDENT, reason=f"{incident_id}: {decision.reason}")
        self.notifier.incident_opened(incident_id, f"{playbook.name} ({playbook.severity})", playbook.description,
                                      {"step": str(snapshot.metrics.step), "decision": decision.reason})
        self.events("incident_opened", record=record)
        record["snapshot_model"] = snapshot
        if decision.kind == "escalate":
            self.escalation = decision.reason
            self._close_incident(record, EngineRuntime(self, record), "escalated")
            return
        self._apply(record, playbook, snapshot)

    def _apply(self, record: dict, playbook, snapshot, skip: set[int] = frozenset()) -> None:
        self._transition(RunState.RECOVERING, reason=record["id"])
        runtime = EngineRuntime(self, record)
        steps = plan(playbook, snapshot, self.loaded.config, record.get("attempt", 1))
        aborted = None
        for step in steps:
            if step.index in skip:
                continue
            result = self._run_step(step, runtime)
            record["actions"].append(result)
            self.journal.append("action_done", incident=record["id"], index=step.index, ok=result["ok"])
            self._save_record(record)
            self.notifier.incident_update(record["id"], f"{step.verb}: {result['summary']}")
            self.events("action", record=record, result=result)
            if runtime.escalated_reason:
                break
            if not result["ok"] and step.on_failure != "continue":
                aborted = step.on_failure
                if aborted == "escalate":
                    runtime.escalate(f"{step.verb} failed: {result['summary']}")
                break
        if runtime.escalated_reason:
            self.escalation = runtime.escalated_reason
            outcome = "escalated"
        elif aborted or not (runtime.resumed or (self.trainer and self.trainer.alive)):
            outcome = "failed" if aborted else "recovered"
            if aborted:
                self.escalation = f"{record['id']}: recovery aborted at a failed action"
        else:
            outcome = "recovered"
        self._close_incident(record, runtime, outcome)

    def _run_step(self, step, runtime) -> dict:
        from engine.actions import REGISTRY
        from engine.actions.base import ActionFailed

        started = time.time()
        base = {"index": step.index, "verb": step.verb, "description": step.description}
        if step.skipped:
            return {**base, "ok": True, "skipped": True, "summary": f"skipped ({step.skipped})", "seconds": 0.0}
        if step.error:
            return {**base, "ok": False, "summary": f"could not plan: {step.error}", "seconds": 0.0}
        try:
            result = REGISTRY[step.verb].apply(step.params, runtime)
            ok, summary = result.ok, result.summary
        except ActionFailed as err:
            ok, summary = False, str(err)
        except Exception as err:  # noqa: BLE001 - a failing action is recorded, never crashes the watcher
            ok, summary = False, f"{type(err).__name__}: {err}"
            self.events("action_traceback", text=traceback.format_exc())
        return {**base, "ok": ok, "summary": summary, "seconds": round(time.time() - started, 3)}

    def _close_incident(self, record: dict, runtime, outcome: str) -> None:
        record["outcome"] = outcome
        for key, default in (("config_changes", {}), ("resumed_from", None), ("resumed_step", None), ("notes", [])):
            record.setdefault(key, default)
        record["closed_at"] = time.time()
        # runbook's own share: detection -> the trainer relaunched (or the decision to stop)
        record["runbook_seconds"] = round(record["closed_at"] - record["detected_at"], 3)
        record["recovery_seconds"] = record["runbook_seconds"]
        record["config_after"] = self.loaded.config.model_dump(mode="json")
        if self.escalation and outcome != "recovered":
            record["escalation_reason"] = self.escalation
        failed_step = record.get("step_at_failure")
        resumed = record.get("resumed_step")
        if failed_step is not None and resumed is not None:
            record["steps_lost"] = max(0, failed_step - resumed)
            record["tokens_lost"] = record["steps_lost"] * self.loaded.config.batch_size * self.loaded.config.model.block_size
        else:
            record["steps_lost"] = record.get("steps_lost")
            record["tokens_lost"] = record.get("tokens_lost")
        self._save_record(record)
        self.journal.append("incident_closed", incident=record["id"], outcome=outcome)
        self.history = self.journal.replay().history
        if outcome == "recovered":
            self._transition(RunState.RUNNING, reason=f"{record['id']} recovered")
        else:
            self._transition(RunState.ESCALATED, reason=self.escalation or outcome)
        if outcome == "recovered" and runtime.resumed:
            # The recovery is over when the trainer makes progress again: report it then.
            self.awaiting_progress = record
        else:
            self._report_incident(record)

    def _save_record(self, record: dict) -> None:
        """Write the incident record atomically; on a full disk keep it in memory and try again after
        the next action (a disk-full recovery makes space first), never leaving half a file."""
        try:
            self.incidents.write(_persistable(record))
        except OSError as error:
            self.events("warning", text=f"could not write {record['id']} yet ({error.strerror}); will retry")

    def _report_incident(self, record: dict, note: str | None = None) -> None:
        """The run-log entry, the Slack close and the console line, once the outcome is known."""
        if note:
            record.setdefault("notes", []).append(note)
            self._save_record(record)
        self._append_run_log(record)
        self.notifier.incident_closed(record["id"], record["outcome"], _closing_summary(record),
                                      escalate=record["outcome"] != "recovered")
        self.events("incident_closed", record=record)

    def _check_recovery_progress(self) -> None:
        record = self.awaiting_progress
        if record is None:
            return
        tracker = self.observer.tracker
        if tracker.progress_since_launch > 0 and tracker.last_progress_time is not None:
            record["first_progress_at"] = tracker.last_progress_time
            record["recovery_seconds"] = round(tracker.last_progress_time - record["detected_at"], 3)
            record["trainer_restart_seconds"] = round(tracker.last_progress_time - record["closed_at"], 3)
            self._save_record(record)
            self.awaiting_progress = None
            self._report_incident(record)

    def _flush_awaiting(self, why: str) -> None:
        if self.awaiting_progress is not None:
            record, self.awaiting_progress = self.awaiting_progress, None
            self._report_incident(record, note=why)

    def _append_run_log(self, record: dict) -> None:
        from engine.run_log import append_entry

        template = self.loaded.config.run_log_template
        try:
            append_entry(self.loaded.run_log, record, self.loaded.resolve(template) if template else None)
        except Exception as err:  # noqa: BLE001 - the record on disk is complete; say what went wrong
            self.events("warning", text=f"could not append to {self.loaded.run_log}: {err}")

    def _escalate_unclaimed(self, snapshot) -> None:
        from engine.matcher import Decision
        from engine.playbook import build_playbook

        code = snapshot.trainer.exit_code
        fallback = build_playbook({
            "name": "unclaimed-failure",
            "description": f"the trainer exited (code {code}) and no playbook matched",
            "severity": "critical",
            "lesson": "Write a playbook for this failure: `runbook replay` the incident after adding it.",
            "match": {"exit": {"nonzero": True}},
            "actions": [{"escalate": {"reason": "no playbook matched this failure"}}],
        })
        self.handle_incident(Decision("escalate", fallback, f"trainer exited with {code} and no playbook matched"), snapshot)


def _persistable(record: dict) -> dict:
    return {k: v for k, v in record.items() if k != "snapshot_model"}


def _closing_summary(record: dict) -> str:
    actions = "; ".join(f"{a['verb']}: {a['summary']}" for a in record["actions"]) or "no action"
    lost = record.get("steps_lost")
    return f"{record['outcome']}: {actions}" + (f" (lost {lost} steps)" if lost is not None else "")
