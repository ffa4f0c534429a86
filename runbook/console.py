"""What `runbook watch` prints: one plain timestamped line per event (CI, nohup, SLURM), or JSON lines
(typed fields: runbook/watch_events.py)."""

from __future__ import annotations

import datetime as dt
import json
import sys

from engine.core.text_safety import for_display, redact, redact_tree
from runbook.shown_values import step_text
from runbook.watch_events import fields


class PlainReporter:
    """Event sink for the Supervisor; prints nothing animated."""

    def __init__(self, stream=None, quiet: bool = False, as_json: bool = False):
        self.stream = stream or sys.stdout
        self.quiet = quiet
        self.as_json = as_json
        self._last_step = None

    def __call__(self, kind: str, **data) -> None:
        line = self.format(kind, data)
        if self.as_json and kind == "launch":   # scripts want each launch; people see it as a transition
            resume = data.get("resume_from")
            line = f"launch {data['launch']}: trainer pid {data['pid']}" + (f", resuming from {resume}" if resume else "")
        if line is None:
            return
        line = for_display(line)   # symptoms, summaries and warnings quote the trainer's log: no escapes, no secrets
        if self.as_json:
            typed = fields(kind, data)   # the schema: runbook/watch_events.py, docs/watch-events.md
            if typed is None:
                return
            payload = {"time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds"), "event": kind,
                       "text": line, **redact_tree(typed, redact)}
            print(json.dumps(payload, allow_nan=False), file=self.stream, flush=True)
        elif not self.quiet or kind in ("incident_opened", "incident_closed", "transition"):
            stamp = dt.datetime.now().strftime("%H:%M:%S")
            print(f"{stamp} {line}", file=self.stream, flush=True)

    def format(self, kind: str, data: dict) -> str | None:
        """The event's line, safe for a terminal (the live view prints these too), or None."""
        line = self._words(kind, data)
        return None if line is None else for_display(line)

    def _words(self, kind: str, data: dict) -> str | None:
        if kind == "observation":
            snap = data["snapshot"]
            m = snap.metrics
            if m.step is None or m.step == self._last_step or m.step % 10:
                return None
            self._last_step = m.step
            tps = f"{m.tokens_per_sec:,.0f} tok/s" if m.tokens_per_sec else "- tok/s"
            val = f" val {m.val_loss:.3f}" if m.val_loss is not None else ""
            loss = f"{m.loss:.3f}" if m.loss is not None else "-"   # a step seen before its loss (a resumed trainer)
            return f"step {m.step} | loss {loss}{val} | {tps} | verified ckpt {snap.checkpoints.newest_verified_step}"
        if kind == "transition":
            return f"[{data['state'].value}] {data['reason']}"
        if kind == "launch":
            return None
        if kind == "incident_opened":
            r = data["record"]
            return f"INCIDENT {r['id']} {r['playbook']}: {r['symptom']} (step {step_text(r['step_at_failure'])})"
        if kind == "action":
            res = data["result"]
            return f"  {data['record']['id']} {res['verb']}: {'ok' if res['ok'] else 'FAILED'} - {res['summary']}"
        if kind == "incident_closed":
            r = data["record"]
            return f"{r['id']} {r['outcome']} in {r['recovery_seconds']:.1f} s (steps lost: {step_text(r.get('steps_lost'))})"
        if kind == "dry_run_plan":
            d = data["decision"]
            steps = "\n".join(f"    {i + 1}. {s.description}" + (f" [{s.skipped or s.error}]" if s.skipped or s.error else "")
                              for i, s in enumerate(data["steps"]))
            return f"DRY-RUN {d.playbook.name} would fire ({d.reason}); plan:\n{steps}"
        if kind in ("dry_run", "warning", "expression_error"):
            return f"{kind}: {data.get('text') or data.get('error')}"
        if kind == "action_traceback":
            return None
        return None
