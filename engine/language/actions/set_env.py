from __future__ import annotations

from pydantic import Field, field_validator

from engine.core.env_names import check_env, env_problem
from engine.language.actions.base import ActionDef, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.core.state import StateSnapshot


class SetEnvParams(Params):
    vars: dict[str, str] = Field(min_length=1, description="environment variables for every later launch")
    diagnostic: bool = Field(False, description="only for diagnosis (NCCL_DEBUG, TORCH_DISTRIBUTED_DEBUG): lifted once "
                             "the next launch has trained watch.diagnostics_healthy_steps steps")

    @field_validator("vars")
    @classmethod
    def _posix(cls, variables: dict[str, str]) -> dict[str, str]:
        return check_env(variables)   # at load (lint, file:line) and again on the rendered values


def describe(p: SetEnvParams, state: StateSnapshot) -> str:
    until = " until the next launch has trained healthily" if p.diagnostic else ""
    return "set " + ", ".join(f"{k}={v}" for k, v in p.vars.items()) + " for the next launches" + until


def apply(p: SetEnvParams, ports: ActionPorts) -> ActionResult:
    problems = [problem for name, value in p.vars.items() if (problem := env_problem(name, value))]
    if problems:   # a templated value can only be checked once rendered; nothing is set or journaled
        return ActionResult(False, "set_env refused: " + "; ".join(problems))
    trainer, incident, variables = ports.trainer, ports.incident, dict(p.vars)
    before = trainer.env_in_force()
    notes = trainer.set_env(variables, p.diagnostic, incident.id)
    after = trainer.env_in_force()
    for name in variables:   # what the next launch gets differently, so it can be undone (engine/watch/remedy_guard.py)
        first = incident.env_changes.get(name, [before.get(name)])[0]
        incident.env_changes[name] = [first, after.get(name)]
    metrics = ports.state.metrics
    trainer.note_env_change(incident.id, list(incident.env_changes),
                            metrics.tokens_per_sec or metrics.baseline_tokens_per_sec)
    text = "environment for later launches: " + ", ".join(f"{k}={v}" for k, v in variables.items())
    text += " (diagnostic: lifted once the next launch trains healthily)" if p.diagnostic else ""
    return ActionResult(True, text + "".join(f"; {note}" for note in notes))


ACTION = ActionDef(
    "set_env", SetEnvParams, "Set environment variables (e.g. NCCL_DEBUG=INFO) for later trainer launches.",
    describe, apply, example={"set_env": {"vars": {"NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "1"}}},
)
