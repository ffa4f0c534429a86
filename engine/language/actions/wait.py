from __future__ import annotations

import time

from pydantic import Field

from engine.language.types import Duration
from engine.language.actions.base import ActionDef, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.core.state import StateSnapshot


class WaitParams(Params):
    seconds: Duration = Field(ge=0, le=3600)



def describe(p: WaitParams, state: StateSnapshot) -> str:
    return f"wait {p.seconds:g} s"


def apply(p: WaitParams, ports: ActionPorts) -> ActionResult:
    time.sleep(p.seconds)
    return ActionResult(True, f"waited {p.seconds:g} s")


ACTION = ActionDef("wait", WaitParams, "Pause before the next action.", describe, apply, example={"wait": {"seconds": "5s"}})
