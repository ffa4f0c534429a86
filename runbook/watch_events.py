"""`runbook watch --json`: one JSON object per line, each with typed fields (documented in
docs/watch-events.md; SCHEMA below is what tests/runs/test_watch_events.py checks every line of a real run
against), so scripts read the step and the loss instead of parsing `text`.

Every object has `time` (ISO 8601, UTC), `event` and `text` (the line the plain output prints).
"""

from __future__ import annotations

import math

from engine.core.events import (ActionDone, DryRun, DryRunPlan, ExpressionError, IncidentClosed, IncidentOpened, Launch,
                                Observed, Transition, WatchEvent, WatchWarning)

INT, NUM, STR, BOOL, NULL, LIST, OBJECT = "integer", "number", "string", "boolean", "null", "array", "object"

# event -> field -> (JSON types allowed, required). A field that does not apply is null, never absent.
SCHEMA: dict[str, dict[str, tuple[tuple[str, ...], bool]]] = {
    "observation": {   # a progress line, at most one per 10 optimizer steps (as in the plain output)
        "state": ((STR,), True), "step": ((INT,), True), "loss": ((NUM, NULL), True),
        "val_loss": ((NUM, NULL), True), "tokens_per_s": ((NUM, NULL), True),
        "tokens": ((INT, NULL), True), "verified_checkpoint_step": ((INT, NULL), True),
    },
    "transition": {"state": ((STR,), True), "previous": ((STR, NULL), True), "reason": ((STR,), True)},
    "launch": {"launch": ((INT,), True), "pid": ((INT,), True), "resume_from": ((STR, NULL), True),
               "env": ((OBJECT,), True)},   # what remedies add to this launch's environment (set_env), {} for none
    "incident_opened": {
        "incident": ((STR,), True), "playbook": ((STR,), True), "symptom": ((STR, NULL), True),
        "step": ((INT, NULL), True),
    },
    "action": {
        "incident": ((STR,), True), "playbook": ((STR,), True), "action": ((STR,), True),
        "outcome": ((STR,), True), "summary": ((STR, NULL), True),
    },
    "incident_closed": {
        "incident": ((STR,), True), "playbook": ((STR,), True), "outcome": ((STR,), True),
        "recovery_seconds": ((NUM, NULL), True), "steps_lost": ((INT, NULL), True),
        "resumed_step": ((INT, NULL), True),
    },
    "dry_run_plan": {"playbook": ((STR,), True), "decision": ((STR,), True), "reason": ((STR,), True),
                     "steps": ((LIST,), True), "actions": ((LIST,), True)},
    "dry_run": {"message": ((STR,), True)},
    "warning": {"message": ((STR,), True)},
    "expression_error": {"message": ((STR,), True)},
}
COMMON = {"time": ((STR,), True), "event": ((STR,), True), "text": ((STR,), True)}
ACTION_OUTCOMES = ("ok", "failed")


def _number(value: object) -> float | None:
    """JSON has no NaN or infinity: a non-finite loss (the NaN playbook's case) is null."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def fields(event: WatchEvent) -> dict | None:
    """PURE. The typed fields of one event, or None for an event --json does not print."""
    match event:
        case Observed(snapshot=snap):
            m = snap.metrics
            return {"state": snap.run_state.value, "step": m.step, "loss": _number(m.loss),
                    "val_loss": _number(m.val_loss), "tokens_per_s": _number(m.tokens_per_sec), "tokens": m.tokens,
                    "verified_checkpoint_step": snap.checkpoints.newest_verified_step}
        case Transition():
            return {"state": event.state.value, "previous": event.previous.value if event.previous else None,
                    "reason": event.reason}
        case Launch():
            return {"launch": event.launch, "pid": event.pid, "resume_from": event.resume_from, "env": dict(event.env)}
        case IncidentOpened(incident=i):
            return {"incident": i.id, "playbook": i.playbook, "symptom": i.symptom, "step": i.step_at_failure}
        case ActionDone(incident=i, result=r):
            return {"incident": i.id, "playbook": i.playbook, "action": r.verb, "outcome": "ok" if r.ok else "failed",
                    "summary": r.summary}
        case IncidentClosed(incident=i):
            return {"incident": i.id, "playbook": i.playbook, "outcome": i.outcome,
                    "recovery_seconds": _number(i.recovery_seconds), "steps_lost": i.steps_lost,
                    "resumed_step": i.resumed_step}
        case DryRunPlan():
            return {"playbook": event.playbook, "decision": event.decision, "reason": event.reason,
                    "steps": [s.description for s in event.steps],
                    # the verbs that would run, in order: a step whose `if:` is false, or that cannot be planned, is left out
                    "actions": [s.verb for s in event.steps if s.skipped is None and not s.error]}
        case DryRun() | WatchWarning() | ExpressionError():
            return {"message": event.text}
    return None


def problems(line: dict) -> list[str]:
    """PURE. How one parsed --json line breaks SCHEMA (empty when it does not)."""
    event = line.get("event")
    spec = SCHEMA.get(event) if isinstance(event, str) else None   # a list or dict here is no key: no TypeError
    if spec is None:
        return [f"unknown event {line.get('event')!r}"]
    allowed = {**COMMON, **spec}
    found = [f"unknown field {k!r}" for k in line if k not in allowed]
    for name, (types, required) in allowed.items():
        if name not in line:
            found += [f"missing field {name!r}"] if required else []
        elif _json_type(line[name]) not in types:
            found.append(f"{name!r} is {_json_type(line[name])}, not {' or '.join(types)}")
    return found


def _json_type(value: object) -> str:
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return INT
    return {float: NUM, str: STR, list: LIST}.get(type(value), "object")
