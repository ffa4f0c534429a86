from __future__ import annotations

from engine.language.actions.base import ActionDef, ActionResult, Params


class StopParams(Params):
    pass


def describe(p: StopParams, state) -> str:
    return "stop the trainer (SIGCONT, SIGTERM, SIGKILL after the grace period) if it is alive"


def apply(p: StopParams, rt) -> ActionResult:
    return ActionResult(True, rt.stop_trainer("playbook stop"))


ACTION = ActionDef(
    "stop", StopParams, "Stop the trainer process (also a stopped/hung one).",
    describe, apply, example={"stop": {}},
)
