from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, model_validator

from engine.language.actions.base import ActionDef, ActionResult, Params


class ResumeParams(Params):
    source: Literal["newest_verified", "step"] = Field(
        "newest_verified", alias="from", description="which checkpoint to resume from"
    )
    step: int | None = Field(None, ge=0, description="with from: step, the optimizer step to resume from")

    @model_validator(mode="after")
    def _step_given(self, info: ValidationInfo) -> "ResumeParams":
        # At load an expression supplies `step` later (validate_params names such keys in the context).
        computed = (info.context or {}).get("computed", ())
        if self.source == "step" and self.step is None and "step" not in computed:
            raise ValueError("from: step needs `step`, the optimizer step to resume from")
        return self


def describe(p: ResumeParams, state) -> str:
    if p.source == "step":
        return f"restart the trainer from checkpoint step {p.step}"
    return "restart the trainer from the newest verified checkpoint (from scratch if none)"


def apply(p: ResumeParams, rt) -> ActionResult:
    return ActionResult(True, rt.resume(p.source, p.step))


ACTION = ActionDef(
    "resume", ResumeParams,
    "Restart the trainer from a verified checkpoint. The current run config is used; when micro_batch_size "
    "changed since the checkpoint, a rescaled copy keeps the token budget and lr schedule exact.",
    describe, apply, example={"resume": {"from": "newest_verified"}},
)
