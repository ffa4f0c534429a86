from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.core.state import StateSnapshot


class SetHyperparametersParams(Params):
    micro_batch_size: int | None = Field(None, gt=0)
    batch_size: int | None = Field(None, gt=0)
    lr: float | None = Field(None, gt=0, allow_inf_nan=False)   # "{{ 1e308 * 10 }}" is inf: refused
    save_interval: int | None = Field(None, gt=0)

    def updates(self) -> dict:
        return {k: v for k, v in self.model_dump().items() if v is not None}


def describe(p: SetHyperparametersParams, state: StateSnapshot) -> str:
    changes = ", ".join(f"{k}={v}" for k, v in p.updates().items()) or "nothing"
    return f"write {changes} into the run config (comments kept) for the next launch"


def apply(p: SetHyperparametersParams, ports: ActionPorts) -> ActionResult:
    updates = p.updates()
    if not updates:
        return ActionResult(True, "no change")
    before = {k: getattr(ports.loaded.config, k) for k in updates}
    ports.trainer.write_config(updates)
    ports.incident.config_changes.update({k: [before[k], v] for k, v in updates.items()})
    summary = "run config: " + ", ".join(f"{k} {before[k]} -> {v}" for k, v in updates.items())
    return ActionResult(True, summary, {"updates": updates})


ACTION = ActionDef(
    "set_hyperparameters", SetHyperparametersParams,
    "Change hyperparameters for the next launch and write them back into the run config. Values may be "
    "expressions, e.g. \"{{ config.micro_batch_size // 2 }}\".",
    describe, apply, example={"set_hyperparameters": {"lr": "{{ config.lr / 2 }}"}},
)
