"""A finished trainer log read as the watch's Observer reads a live one: `runbook status`, `runbook report` and
`runbook triage` take their figures from the same parser and the same MetricTracker as the watch (its heartbeat,
its Prometheus metrics), so tokens/s, tokens and the last loss cannot differ between them.

Beyond the tracker's windows a report needs every event of the log (the loss curve): the tracker here also keeps
them, in order, with the step the tracker filed each under.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from engine.observe.events import Event
from engine.observe.observer import LineParser, MetricTracker, Observer
from engine.observe.throughput import ProgressMeaning


@dataclass
class RecordingTracker(MetricTracker):
    """A MetricTracker that also keeps every event it was given, with the step in force after it."""

    events: list[tuple[Event, int | None]] = field(default_factory=list)

    def on_event(self, event: Event, now: float) -> None:
        super().on_event(event, now)
        self.events.append((event, self.step))


def replay(lines: list[str], adapter: LineParser, meaning: ProgressMeaning, now: float = 0.0) -> RecordingTracker:
    """The tracker after the Observer has read these lines (a whole log: the last line waits for nothing)."""
    tracker = RecordingTracker(meaning)
    Observer(adapter, Path("."), meaning, tracker=tracker).take_lines(lines, now)   # no snapshot: no evidence, no disk
    return tracker
