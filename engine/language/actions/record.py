from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.core.state import StateSnapshot


class RecordParams(Params):
    note: str = Field(min_length=1)


def describe(p: RecordParams, state: StateSnapshot) -> str:
    return f"add to the incident record: {p.note!r}"


def apply(p: RecordParams, ports: ActionPorts) -> ActionResult:
    ports.note(p.note)
    return ActionResult(True, "recorded")


ACTION = ActionDef(
    "record", RecordParams, "Add a note to the incident record (and the run-log entry).",
    describe, apply, example={"record": {"note": "preempted at step {{ state.metrics.step }}"}},
)
