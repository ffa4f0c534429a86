"""The incident record, typed: what was seen, what was decided, the plan, what each step did, the outcome.

Written as one JSON file per incident (engine/records/incident_store.py). `schema_version` says which writer made
it: records from before it existed (version 1, runbook at 78fd88e and earlier) carry the same keys
and load as they are; version 3 adds `signature` and `same_as` (engine/records/signature.py), absent (None)
in older records, whose signature readers compute from the stored snapshot
(`signature_of_record`). Fields this version does not know are kept, so a newer record survives an
older reader's rewrite.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any, Iterable, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from engine.records.signature import Signature, signature_of
from engine.core.events import IncidentView
from engine.core.state import StateSnapshot

SCHEMA_VERSION = 3

Outcome = Literal["open", "recovered", "escalated", "failed"]


# What opening a record reads of the playbook and of the matcher's decision (engine/language, a floor
# above this one: described here by shape, not imported).
class PlaybookFacts(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def content_hash(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def lesson(self) -> str: ...


class DecisionFacts(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def matched(self) -> Iterable[str]: ...
    @property
    def inhibited(self) -> Iterable[str]: ...


class ActionRecord(BaseModel):
    """What one planned step did."""

    model_config = ConfigDict(extra="allow")
    index: int
    verb: str
    description: str = ""
    ok: bool
    summary: str = ""
    seconds: float = 0.0
    skipped: bool = False


class Incident(BaseModel):
    model_config = ConfigDict(extra="allow", validate_assignment=False)

    schema_version: int = 1            # absent in records written before the field existed
    id: str
    playbook: str = "unknown"
    playbook_hash: str | None = None
    playbook_source: str | None = None
    severity: str | None = None
    symptom: str | None = None
    lesson: str | None = None
    decision: str = "recover"          # "recover" | "escalate"
    attempt: int = 1
    decision_reason: str = ""
    matched: list[str] = Field(default_factory=list)
    inhibited: list[str] = Field(default_factory=list)
    # seen
    detected_at: float | None = None
    opened_at: float | None = None
    opened_at_iso: str | None = None
    step_at_failure: int | None = None
    tokens_at_failure: int | None = None
    trainer_exit_code: int | None = None
    log_excerpt: list[str] = Field(default_factory=list)
    snapshot: dict[str, Any] = Field(default_factory=dict)     # the StateSnapshot as JSON
    signature: Signature | None = None   # schema 3: what makes this failure "the same" as another
    same_as: str | None = None           # schema 3: the run's first earlier incident with this signature
    # the data window a skip_data action skipped for every later launch: steps, positions, batches, tokens
    data_skipped: dict[str, Any] | None = None
    # decided: the plan computed once, at opening; it is the plan that runs
    plan: list[dict[str, Any]] = Field(default_factory=list)
    config_before: dict[str, Any] = Field(default_factory=dict)
    # done
    actions: list[ActionRecord] = Field(default_factory=list)
    outcome: Outcome = "open"
    notes: list[str] = Field(default_factory=list)
    config_changes: dict[str, list[Any]] = Field(default_factory=dict)   # key -> [before, after]
    env_changes: dict[str, list[Any]] = Field(default_factory=dict)      # variable -> [before (None: unset), after]
    reverted: str | None = None          # why this incident's remedy was undone (the launch it made died at once)
    resumed_from: str | None = None
    resumed_step: int | None = None
    rollback_target_step: int | None = None
    freed_bytes: int = 0
    deleted: list[str] = Field(default_factory=list)
    left_alone: list[str] = Field(default_factory=list)
    data_scan: dict[str, Any] | None = None
    diagnosis: dict[str, Any] | None = None
    escalation_reason: str | None = None
    # closed
    closed_at: float | None = None
    runbook_seconds: float | None = None
    recovery_seconds: float | None = None
    first_progress_at: float | None = None
    trainer_restart_seconds: float | None = None
    config_after: dict[str, Any] | None = None
    steps_lost: int | None = None
    tokens_lost: int | None = None

    _snapshot_model: StateSnapshot | None = PrivateAttr(default=None)   # the StateSnapshot object, while the incident runs

    @classmethod
    def open(cls, incident_id: str, playbook: PlaybookFacts, decision: DecisionFacts, snapshot: StateSnapshot,
             attempt: int, plan: list[dict], config_before: dict) -> "Incident":
        now = time.time()
        incident = cls(
            schema_version=SCHEMA_VERSION, id=incident_id, playbook=playbook.name,
            playbook_hash=playbook.content_hash, playbook_source=playbook.source, severity=playbook.severity,
            symptom=playbook.description, lesson=playbook.lesson, decision=decision.kind, attempt=attempt,
            decision_reason=decision.reason, matched=list(decision.matched), inhibited=list(decision.inhibited),
            detected_at=snapshot.time, opened_at=now,
            opened_at_iso=dt.datetime.fromtimestamp(now, dt.timezone.utc).isoformat(timespec="seconds"),
            step_at_failure=snapshot.metrics.step, tokens_at_failure=snapshot.metrics.tokens,
            trainer_exit_code=snapshot.trainer.exit_code, log_excerpt=list(snapshot.tail[-40:]),
            snapshot=snapshot.model_dump(mode="json"), plan=plan, config_before=config_before,
            signature=signature_of(snapshot),
        )
        incident._snapshot_model = snapshot
        return incident

    @property
    def state(self) -> StateSnapshot:
        """The snapshot the playbook matched, as the object expressions and actions read."""
        if self._snapshot_model is None:
            self._snapshot_model = StateSnapshot.model_validate(self.snapshot)
        return self._snapshot_model

    def note(self, text: str) -> None:
        self.notes.append(text)

    def to_json(self) -> dict:
        return self.model_dump(mode="json")

    def view(self) -> IncidentView:
        """A frozen copy for the event bus's listeners (engine/core/events.py)."""
        step = self.plan[len(self.actions)] if len(self.actions) < len(self.plan) else None
        doing = step.get("description") if isinstance(step, dict) else None
        return IncidentView(id=self.id, playbook=self.playbook, severity=self.severity, symptom=self.symptom,
                            step_at_failure=self.step_at_failure, outcome=self.outcome,
                            doing=doing if isinstance(doing, str) else None, recovery_seconds=self.recovery_seconds,
                            steps_lost=self.steps_lost, resumed_step=self.resumed_step)

    def close(self, outcome: Outcome, config_after: dict, tokens_per_step: int, escalation: str | None) -> None:
        """Set the outcome and the figures derived from what the incident learnt."""
        self.outcome = outcome
        self.closed_at = time.time()
        # runbook's own share: detection -> the trainer relaunched (or the decision to stop)
        self.runbook_seconds = round(self.closed_at - (self.detected_at or self.closed_at), 3)
        self.recovery_seconds = self.runbook_seconds
        self.config_after = config_after
        if escalation and outcome != "recovered":
            self.escalation_reason = escalation
        if self.step_at_failure is not None and self.resumed_step is not None:
            self.steps_lost = max(0, self.step_at_failure - self.resumed_step)
            self.tokens_lost = self.steps_lost * tokens_per_step

    def first_progress(self, at: float) -> None:
        """The recovery is over when the relaunched trainer makes progress again."""
        self.first_progress_at = at
        self.recovery_seconds = round(at - (self.detected_at or at), 3)
        self.trainer_restart_seconds = round(at - (self.closed_at or at), 3)
