from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.core.state import StateSnapshot


class EscalateParams(Params):
    reason: str = Field(min_length=1)


def describe(p: EscalateParams, state: StateSnapshot) -> str:
    return f"stop acting automatically and hand the run to a human: {p.reason}"


def apply(p: EscalateParams, ports: ActionPorts) -> ActionResult:
    ports.effects.escalated_reason = p.reason   # the incident runner stops after this action
    return ActionResult(True, f"escalated: {p.reason}")


ACTION = ActionDef(
    "escalate", EscalateParams, "Stop automatic recovery, notify a human (with the configured @-mention).",
    describe, apply, example={"escalate": {"reason": "micro_batch_size is already 1"}},
)
