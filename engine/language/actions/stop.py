from __future__ import annotations

from engine.language.actions.base import ActionDef, ActionResult, Params
from engine.language.actions.ports import ActionContext
from engine.core.state import StateSnapshot


class StopParams(Params):
    pass


def describe(p: StopParams, state: StateSnapshot) -> str:
    return "stop the trainer (SIGCONT, SIGTERM, SIGKILL after the grace period) if it is alive"


def apply(p: StopParams, ctx: ActionContext) -> ActionResult:
    return ActionResult(True, ctx.trainer.stop("playbook stop"))


ACTION = ActionDef(
    "stop", StopParams, "Stop the trainer process (also a stopped/hung one).",
    describe, apply, example={"stop": {}},
)
