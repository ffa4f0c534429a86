from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionResult, Params


class RecordParams(Params):
    note: str = Field(min_length=1)


def describe(p: RecordParams, state) -> str:
    return f"add to the incident record: {p.note!r}"


def apply(p: RecordParams, rt) -> ActionResult:
    rt.note(p.note)
    return ActionResult(True, "recorded")


ACTION = ActionDef(
    "record", RecordParams, "Add a note to the incident record (and the run-log entry).",
    describe, apply, example={"record": {"note": "preempted at step {{ state.metrics.step }}"}},
)
