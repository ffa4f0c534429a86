from __future__ import annotations

import time

from pydantic import Field, field_validator

from engine.language.types import Duration
from engine.language.actions.base import ActionDef, ActionFailed, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.core.state import StateSnapshot, stall
from engine.expr.expressions import Expression, evaluate_condition
from engine.expr.expressions import compile_expression


class WaitForParams(Params):
    condition: str = Field(description="expression over `state` and `config`, re-checked on every observation")
    timeout: Duration = Field(600.0, gt=0, le=86400, description="give up (the action fails) after this long")

    @field_validator("condition")
    @classmethod
    def _compiles(cls, value: str) -> str:
        compile_expression(value)
        return value



def describe(p: WaitForParams, state: StateSnapshot) -> str:
    return f"keep observing until {p.condition} (at most {p.timeout:g} s)"


def apply(p: WaitForParams, ports: ActionPorts) -> ActionResult:
    met, waited = wait_for(compile_expression(p.condition), p.timeout, ports)
    if not met:
        raise ActionFailed(f"{p.condition} still false after {waited:.1f} s")
    return ActionResult(True, f"{p.condition} true after {waited:.1f} s")


def wait_for(condition: Expression, timeout: float, ports: ActionPorts) -> tuple[bool, float]:
    """Keep observing (lines, metrics, checkpoints) until the condition holds or time runs out."""
    started = time.time()
    while True:
        snapshot = ports.session.observe()
        met, _error = evaluate_condition(condition, {"state": snapshot, "config": ports.loaded.config})
        waited = time.time() - started
        # Stop waiting when something else needs the watcher: the trainer died or stopped progressing.
        stuck = stall(snapshot)
        stalled = stuck is not None and stuck[1] >= stuck[2]   # start-up is judged by its signs of life
        if met or waited >= timeout or not snapshot.trainer.alive or stalled:
            return met, waited
        time.sleep(ports.loaded.config.watch.poll_interval_s)


ACTION = ActionDef(
    "wait_for", WaitForParams,
    "Keep observing the run (the incident stays open) until a condition holds, e.g. throughput is back. "
    "It gives up early (as a failure) when the trainer exits or stops making progress, so other playbooks can act.",
    describe, apply,
    example={"wait_for": {"condition": "state.metrics.tokens_per_sec > 0.8 * state.metrics.baseline_tokens_per_sec",
                          "timeout": "10m"}},
)
