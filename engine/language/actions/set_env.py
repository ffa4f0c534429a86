from __future__ import annotations

from pydantic import Field, field_validator

from engine.core.env_names import check_env, env_problem
from engine.language.actions.base import ActionDef, ActionResult, Params


class SetEnvParams(Params):
    vars: dict[str, str] = Field(min_length=1, description="environment variables for every later launch")
    diagnostic: bool = Field(False, description="only for diagnosis (NCCL_DEBUG, TORCH_DISTRIBUTED_DEBUG): lifted once "
                             "the next launch has trained watch.diagnostics_healthy_steps steps")

    @field_validator("vars")
    @classmethod
    def _posix(cls, variables: dict[str, str]) -> dict[str, str]:
        return check_env(variables)   # at load (lint, file:line) and again on the rendered values


def describe(p: SetEnvParams, state) -> str:
    until = " until the next launch has trained healthily" if p.diagnostic else ""
    return "set " + ", ".join(f"{k}={v}" for k, v in p.vars.items()) + " for the next launches" + until


def apply(p: SetEnvParams, rt) -> ActionResult:
    problems = [problem for name, value in p.vars.items() if (problem := env_problem(name, value))]
    if problems:   # a templated value can only be checked once rendered; nothing is set or journaled
        return ActionResult(False, "set_env refused: " + "; ".join(problems))
    return ActionResult(True, rt.set_env(dict(p.vars), p.diagnostic))


ACTION = ActionDef(
    "set_env", SetEnvParams, "Set environment variables (e.g. NCCL_DEBUG=INFO) for later trainer launches.",
    describe, apply, example={"set_env": {"vars": {"NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "1"}}},
)
