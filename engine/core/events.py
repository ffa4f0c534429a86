"""What leaves the watch loop: typed events on one bus. The console, the live view, `--json`, and any
other listener subscribe; the loop never knows who listens (Lightning's callbacks, torch elastic's
events). Every payload is a frozen copy (events reach listeners on the supervisor's, upkeep's and the
pollers' threads): an incident travels as an `IncidentView`, never as the mutable record or its dict.

(The trainer's own log lines are engine/observe/events.py's: what a trainer printed, not what runbook did.)
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Protocol, Union

from engine.core.notifier import IncidentLabels, Notifier
from engine.core.state import RunPhase, StateSnapshot

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IncidentView:
    """What listeners show of an incident at the moment of the event."""

    id: str
    playbook: str
    severity: str | None = None
    symptom: str | None = None
    step_at_failure: int | None = None
    outcome: str = "open"
    doing: str | None = None              # the plan's next step, while open
    recovery_seconds: float | None = None
    steps_lost: int | None = None
    resumed_step: int | None = None


@dataclass(frozen=True)
class ActionResult:
    verb: str
    ok: bool
    summary: str = ""


class PlannedStepLike(Protocol):
    """What a view needs of the planner's PlannedStep (engine/language/planner.py: a floor above this one)."""

    @property
    def description(self) -> str: ...
    @property
    def verb(self) -> str: ...
    @property
    def skipped(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...


@dataclass(frozen=True)
class PlannedStepView:
    description: str
    verb: str
    skipped: str | None = None   # why a step whose `if:` is false is left out
    error: str | None = None     # why it could not be planned

    @classmethod
    def of(cls, step: PlannedStepLike) -> "PlannedStepView":
        """From the planner's PlannedStep."""
        return cls(step.description, step.verb, step.skipped, step.error)


@dataclass(frozen=True)
class Observed:
    kind: ClassVar[str] = "observation"
    snapshot: StateSnapshot
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class Transition:
    kind: ClassVar[str] = "transition"
    previous: RunPhase | None
    state: RunPhase
    reason: str


@dataclass(frozen=True)
class Launch:
    kind: ClassVar[str] = "launch"
    launch: int
    pid: int
    resume_from: str | None = None
    env: dict[str, str] = field(default_factory=dict)   # what remedies add to this launch's environment


@dataclass(frozen=True)
class IncidentOpened:
    kind: ClassVar[str] = "incident_opened"
    incident: IncidentView
    title: str = ""                 # what a notice heads with: the playbook and its severity
    summary: str = ""
    fields: dict[str, str] = field(default_factory=dict)   # step, decision, signature


@dataclass(frozen=True)
class ActionDone:
    kind: ClassVar[str] = "action"
    incident: IncidentView
    result: ActionResult


@dataclass(frozen=True)
class ActionTraceback:
    kind: ClassVar[str] = "action_traceback"
    text: str


@dataclass(frozen=True)
class IncidentClosed:
    kind: ClassVar[str] = "incident_closed"
    incident: IncidentView
    summary: str = ""
    escalate: bool = False          # the team must act: a notice mentions them
    record_json: str = ""           # the whole record as saved, as JSON text (an immutable copy): the run log's entry


@dataclass(frozen=True)
class DryRun:
    kind: ClassVar[str] = "dry_run"
    text: str


@dataclass(frozen=True)
class DryRunPlan:
    kind: ClassVar[str] = "dry_run_plan"
    playbook: str
    decision: str
    reason: str
    steps: tuple[PlannedStepView, ...]


@dataclass(frozen=True)
class WatchWarning:
    kind: ClassVar[str] = "warning"
    text: str


@dataclass(frozen=True)
class ExpressionError:
    kind: ClassVar[str] = "expression_error"
    text: str


@dataclass(frozen=True)
class UpkeepRan:
    kind: ClassVar[str] = "upkeep"
    job: str
    status: str
    text: str


WatchEvent = Union[Observed, Transition, Launch, IncidentOpened, ActionDone, ActionTraceback, IncidentClosed,
                   DryRun, DryRunPlan, WatchWarning, ExpressionError, UpkeepRan]
Publish = Callable[[WatchEvent], None]
KINDS: tuple[str, ...] = tuple(t.kind for t in WatchEvent.__args__)   # type: ignore[attr-defined]


def ignore(event: WatchEvent) -> None:
    """The publish of a component nobody listens to."""


class EventBus:
    """One publisher, many subscribers, called in the order they subscribed on the publisher's thread. A
    subscriber that raises is logged and the others still hear the event: a broken panel never stops a
    recovery."""

    def __init__(self, *subscribers: Publish) -> None:
        self._subscribers: list[Publish] = list(subscribers)
        self._lock = threading.Lock()

    def subscribe(self, subscriber: Publish) -> None:
        with self._lock:
            self._subscribers.append(subscriber)

    def publish(self, event: WatchEvent) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            try:
                subscriber(event)
            except Exception:   # noqa: BLE001 - one listener's fault is not the loop's
                log.exception("a listener failed on a %s event", event.kind)

    __call__ = publish


class NotifierListener:
    """The notifier (engine/core/notifier.py: its receivers and their routes) as one more subscriber: an
    incident's opening, its steps and its close become notices, labelled with the incident's severity and
    playbook for the routes. (The `notify` action calls the notifier itself: its failure is the step's.)"""

    def __init__(self, notifier: Notifier) -> None:
        self.notifier = notifier

    def __call__(self, event: WatchEvent) -> None:
        match event:
            case IncidentOpened(incident=i):
                self.notifier.incident_opened(i.id, event.title or i.playbook, event.summary, dict(event.fields),
                                              labels=_labels(i))
            case ActionDone(incident=i, result=r):
                self.notifier.incident_update(i.id, f"{r.verb}: {r.summary}")
            case IncidentClosed(incident=i):
                self.notifier.incident_closed(i.id, i.outcome, event.summary, escalate=event.escalate,
                                              labels=_labels(i))


def _labels(incident: IncidentView) -> IncidentLabels:
    return IncidentLabels(incident.severity or "warning", incident.playbook)
