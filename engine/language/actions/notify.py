from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.core.state import StateSnapshot


class NotifyParams(Params):
    text: str = Field(min_length=1)


def describe(p: NotifyParams, state: StateSnapshot) -> str:
    return f"post to the incident's Slack thread: {p.text!r}"


def apply(p: NotifyParams, ports: ActionPorts) -> ActionResult:
    ports.notices.incident_update(ports.incident.id, p.text)
    return ActionResult(True, "notified")


ACTION = ActionDef(
    "notify", NotifyParams, "Post a message in the incident's Slack thread.",
    describe, apply, example={"notify": {"text": "loss {{ state.metrics.loss }}"}},
)
