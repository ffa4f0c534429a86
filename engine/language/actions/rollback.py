from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionResult, Params


class RollbackParams(Params):
    steps: int = Field(0, ge=0, description="roll back to a checkpoint at least this many steps before the first bad step")
    bad_step: int | None = Field(
        None, ge=0, description="first bad optimizer step (default: the step of the failure); an expression "
        "such as \"{{ state.metrics.last_healthy_step }}\" renders to a number"
    )
    scan_nonfinite: bool = Field(True, description="also quarantine checkpoints whose weights hold NaN/Inf")


def describe(p: RollbackParams, state) -> str:
    bad = p.bad_step if p.bad_step is not None else "the failing step"
    return (f"quarantine every checkpoint at or after {bad}"
            f"{' and any with non-finite weights' if p.scan_nonfinite else ''}; "
            f"the newest clean checkpoint at least {p.steps} steps earlier becomes the resume point")


def apply(p: RollbackParams, rt) -> ActionResult:
    bad = int(p.bad_step) if p.bad_step is not None else None
    return ActionResult(True, rt.rollback(bad, p.steps, p.scan_nonfinite))


ACTION = ActionDef(
    "rollback", RollbackParams,
    "Quarantine checkpoints saved at/after the first bad step (and any with non-finite weights) so the next "
    "resume starts from the newest clean checkpoint far enough before it. Never deletes.",
    describe, apply, example={"rollback": {"steps": 20}},
)
