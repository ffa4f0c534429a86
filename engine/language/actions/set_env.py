from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionResult, Params


class SetEnvParams(Params):
    vars: dict[str, str] = Field(min_length=1, description="environment variables for every later launch")


def describe(p: SetEnvParams, state) -> str:
    return "set " + ", ".join(f"{k}={v}" for k, v in p.vars.items()) + " for the next launches"


def apply(p: SetEnvParams, rt) -> ActionResult:
    return ActionResult(True, rt.set_env(dict(p.vars)))


ACTION = ActionDef(
    "set_env", SetEnvParams, "Set environment variables (e.g. NCCL_DEBUG=INFO) for later trainer launches.",
    describe, apply, example={"set_env": {"vars": {"NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "1"}}},
)
