from __future__ import annotations

from engine.language.actions.base import ActionDef, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.core.state import StateSnapshot


class StopParams(Params):
    pass


def describe(p: StopParams, state: StateSnapshot) -> str:
    return "stop the trainer (SIGCONT, SIGTERM, SIGKILL after the grace period) if it is alive"


def apply(p: StopParams, ports: ActionPorts) -> ActionResult:
    return ActionResult(True, ports.trainer.stop("playbook stop"))


ACTION = ActionDef(
    "stop", StopParams, "Stop the trainer process (also a stopped/hung one).",
    describe, apply, example={"stop": {}},
)
