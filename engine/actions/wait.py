from __future__ import annotations

import time

from pydantic import Field, field_validator

from engine.actions.base import ActionDef, ActionResult, Params


class WaitParams(Params):
    seconds: float = Field(ge=0, le=3600)

    @field_validator("seconds", mode="before")
    @classmethod
    def _duration(cls, v):
        from engine.playbook import parse_duration

        return parse_duration(v)


def describe(p: WaitParams, state) -> str:
    return f"wait {p.seconds:g} s"


def apply(p: WaitParams, rt) -> ActionResult:
    time.sleep(p.seconds)
    return ActionResult(True, f"waited {p.seconds:g} s")


ACTION = ActionDef("wait", WaitParams, "Pause before the next action.", describe, apply, example={"wait": {"seconds": "5s"}})
