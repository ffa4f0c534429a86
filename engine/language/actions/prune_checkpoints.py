from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.checkpoints.retention import retain
from engine.core.events import WatchWarning
from engine.core.state import StateSnapshot


class PruneParams(Params):
    keep_last_k: int | None = Field(None, gt=0, description="default: keep_last_k of the run config")
    keep_best: bool = Field(True, description="also keep the checkpoint with the lowest val loss")
    remove_partial: bool = Field(True, description="remove leftovers of interrupted saves first")


def describe(p: PruneParams, state: StateSnapshot) -> str:
    k = p.keep_last_k or "config.keep_last_k"
    return (f"{'remove partial saves, then ' if p.remove_partial else ''}delete checkpoints except the newest {k}"
            f"{' and the best' if p.keep_best else ''} (never the newest verified one nor the resume point)")


def apply(p: PruneParams, ports: ActionPorts) -> ActionResult:
    catalog, incident = ports.checkpoints, ports.incident
    catalog.refresh(saving_from_step=ports.session.saving_from())
    result = retain(catalog, p.keep_last_k or ports.loaded.config.keep_last_k,
                    ports.session.best_val_step() if p.keep_best else None, ports.trainer.alive, p.remove_partial)
    incident.freed_bytes += result.freed_bytes
    incident.deleted.extend(result.removed + result.deleted)
    if result.foreign:
        incident.left_alone = list(result.foreign)
        ports.note(result.foreign_warning + f" (in {ports.loaded.out_dir})")
        ports.events(WatchWarning(result.foreign_warning))
    return ActionResult(True, result.summary())


ACTION = ActionDef(
    "prune_checkpoints", PruneParams,
    "Free disk in out_dir: remove partial saves and old step checkpoints (only those this run's trainer saved), "
    "keeping best + newest keep_last_k.",
    describe, apply, example={"prune_checkpoints": {"keep_last_k": 2}},
)
