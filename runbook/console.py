"""What `runbook watch` prints: one plain timestamped line per event (CI, nohup, SLURM), or JSON lines
(typed fields: runbook/watch_events.py). A subscriber of the watch loop's event bus (engine/core/events.py)."""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import TextIO

from engine.core.events import (ActionDone, DryRun, DryRunPlan, ExpressionError, IncidentClosed, IncidentOpened,
                                Launch, Observed, Transition, WatchEvent, WatchWarning)
from engine.core.text_safety import for_display, redact, redact_tree
from runbook.shown_values import step_text
from runbook.watch_events import fields

HISTORY = (IncidentOpened, IncidentClosed, Transition)   # what --quiet still prints


class PlainReporter:
    """Prints each event it hears as one line; nothing animated."""

    def __init__(self, stream: TextIO | None = None, quiet: bool = False, as_json: bool = False) -> None:
        self.stream = stream or sys.stdout
        self.quiet = quiet
        self.as_json = as_json
        self._last_step: int | None = None

    def __call__(self, event: WatchEvent) -> None:
        line = self.format(event)
        if self.as_json and isinstance(event, Launch):   # scripts want each launch; people see it as a transition
            line = f"launch {event.launch}: trainer pid {event.pid}" + (
                f", resuming from {event.resume_from}" if event.resume_from else "")
        if line is None:
            return
        line = for_display(line)   # symptoms, summaries and warnings quote the trainer's log: no escapes, no secrets
        if self.as_json:
            typed = fields(event)   # the schema: runbook/watch_events.py, docs/watch-events.md
            if typed is None:
                return
            payload = {"time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds"), "event": event.kind,
                       "text": line, **redact_tree(typed, redact)}
            print(json.dumps(payload, allow_nan=False), file=self.stream, flush=True)
        elif not self.quiet or isinstance(event, HISTORY):
            stamp = dt.datetime.now().strftime("%H:%M:%S")
            print(f"{stamp} {line}", file=self.stream, flush=True)

    def format(self, event: WatchEvent) -> str | None:
        """The event's line, safe for a terminal (the live view prints these too), or None."""
        line = self._words(event)
        return None if line is None else for_display(line)

    def _words(self, event: WatchEvent) -> str | None:
        match event:
            case Observed(snapshot=snap):
                m = snap.metrics
                if m.step is None or m.step == self._last_step or m.step % 10:
                    return None
                self._last_step = m.step
                tps = f"{m.tokens_per_sec:,.0f} tok/s" if m.tokens_per_sec else "- tok/s"
                val = f" val {m.val_loss:.3f}" if m.val_loss is not None else ""
                loss = f"{m.loss:.3f}" if m.loss is not None else "-"   # a step seen before its loss (a resumed trainer)
                return f"step {m.step} | loss {loss}{val} | {tps} | verified ckpt {snap.checkpoints.newest_verified_step}"
            case Transition():
                return f"[{event.state.value}] {event.reason}"
            case IncidentOpened(incident=i):
                return f"INCIDENT {i.id} {i.playbook}: {i.symptom} (step {step_text(i.step_at_failure)})"
            case ActionDone(incident=i, result=r):
                return f"  {i.id} {r.verb}: {'ok' if r.ok else 'FAILED'} - {r.summary}"
            case IncidentClosed(incident=i):
                seconds = f"{i.recovery_seconds:.1f}" if i.recovery_seconds is not None else "-"
                return f"{i.id} {i.outcome} in {seconds} s (steps lost: {step_text(i.steps_lost)})"
            case DryRunPlan():
                steps = "\n".join(f"    {n + 1}. {s.description}" + (f" [{s.skipped or s.error}]" if s.skipped or s.error else "")
                                  for n, s in enumerate(event.steps))
                return f"DRY-RUN {event.playbook} would fire ({event.reason}); plan:\n{steps}"
            case DryRun() | WatchWarning() | ExpressionError():
                return f"{event.kind}: {event.text}"
        return None   # a launch (a transition follows), a traceback (the run log keeps it), upkeep
