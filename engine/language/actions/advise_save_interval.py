from __future__ import annotations

from engine.language.actions.base import ActionDef, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.core.state import StateSnapshot


class AdviseParams(Params):
    pass


def describe(p: AdviseParams, state: StateSnapshot) -> str:
    return "compare save_interval with the Young-Daly optimum from observed save cost and time between failures"


def apply(p: AdviseParams, ports: ActionPorts) -> ActionResult:
    advice = ports.session.save_interval_advice()
    if advice:
        ports.note(advice)
        return ActionResult(True, advice)
    return ActionResult(True, "save_interval is within 2x of the Young-Daly optimum (or too little is known yet)")


ACTION = ActionDef(
    "advise_save_interval", AdviseParams,
    "Say when save_interval is far from sqrt(2 x save cost x mean time between failures) (Young-Daly).",
    describe, apply, example={"advise_save_interval": {}},
)
