from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionResult, Params


class SkipDataParams(Params):
    margin: int = Field(0, ge=0, le=10**9, description="steps past the first bad step whose data is skipped too")


def describe(p: SkipDataParams, state) -> str:
    return (f"after the rollback: the data of the steps from its resume point to {p.margin} step(s) past the first bad "
            "step is skipped by every later launch (the step counter and lr schedule are kept)")


def apply(p: SkipDataParams, rt) -> ActionResult:
    return ActionResult(True, rt.skip_data(p.margin))


ACTION = ActionDef(
    "skip_data", SkipDataParams,
    "After a rollback in the same incident: later launches skip the data window the divergence came from, from "
    "the rollback's resume point to `margin` steps past the first bad step, without computing it (the field "
    "manual's \"skip the suspicious batch\"). The trainer maps its step to a data position past the skipped "
    "windows (RUNBOOK_DATA_SKIP; runbook.sdk.data_position for a script). Recorded in the incident, the run log "
    "and the journal: steps, positions, batches and tokens.",
    describe, apply, example={"skip_data": {"margin": 10}},
)
