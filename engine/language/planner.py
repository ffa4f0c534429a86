"""Pure planning: a decision + the snapshot + the run config -> the ordered list of steps to apply.

Guards (`if:`) and "{{ ... }}" parameters are evaluated here, against the state the matcher saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import ValidationError

from engine.language.actions import REGISTRY, Params
from engine.expr.expressions import compile_expression, evaluate_condition, is_expression, is_template, render_template
from engine.language.playbook import Playbook

if TYPE_CHECKING:
    from engine.core.config import RunConfig
    from engine.core.state import StateSnapshot


@dataclass(frozen=True)
class PlannedStep:
    index: int
    verb: str
    params: Params | None         # the validated params model; None when planning failed
    description: str
    on_failure: str
    skipped: str | None = None    # why the step will not run (its guard is false)
    error: str | None = None      # why it could not be planned (bad expression value)

    def to_dict(self) -> dict:
        return {
            "index": self.index, "verb": self.verb, "description": self.description,
            "params": self.params.model_dump(mode="json", by_alias=True) if self.params is not None else None,
            "on_failure": self.on_failure, "skipped": self.skipped, "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "PlannedStep":
        """The stored step, to be run as stored (a restarted watcher continues the incident's own plan)."""
        definition = REGISTRY[data["verb"]]
        params, error = data.get("params"), data.get("error")
        try:
            params = definition.params.model_validate(params) if params is not None else None
        except ValidationError as err:   # stored by an older runbook that let it through (e.g. set_env "A.B")
            params, error = None, f"stored params no longer valid: {err.errors()[0]['msg'].removeprefix('Value error, ')}"
        return cls(
            index=int(data["index"]), verb=data["verb"], params=params,
            description=str(data.get("description", "")), on_failure=str(data.get("on_failure", "abort")),
            skipped=data.get("skipped"), error=error,
        )


def _evaluate_params(raw: dict, context: dict) -> dict:
    values = {}
    for key, value in raw.items():
        if is_expression(value):
            values[key] = compile_expression(value).evaluate(**context)
        elif is_template(value):
            values[key] = render_template(value, context)
        else:
            values[key] = value
    return values


def plan(playbook: Playbook, state: StateSnapshot, config: RunConfig, attempt: int = 1) -> list[PlannedStep]:
    """`attempt` is 1 for the first firing of this playbook in its limits window, 2 for a repeat..."""
    context = {"state": state, "config": config, "attempt": attempt}
    steps = []
    for index, step in enumerate(playbook.actions):
        definition = REGISTRY[step.verb]
        if step.condition is not None:
            holds, error = evaluate_condition(compile_expression(step.condition), context)
            if not holds:
                steps.append(PlannedStep(index, step.verb, None, f"skip {step.verb}", step.on_failure,
                                         skipped=error or f"if: {step.condition} is false"))
                continue
        try:
            params = definition.params.model_validate(_evaluate_params(step.params, context))
        except (ValidationError, Exception) as err:  # noqa: BLE001 - any bad value fails this step only
            message = err.errors()[0]["msg"] if isinstance(err, ValidationError) else f"{type(err).__name__}: {err}"
            steps.append(PlannedStep(index, step.verb, None, f"{step.verb}: cannot plan", step.on_failure, error=message))
            continue
        steps.append(PlannedStep(index, step.verb, params, definition.describe(params, state), step.on_failure))
    return steps
