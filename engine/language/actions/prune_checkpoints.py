from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionResult, Params


class PruneParams(Params):
    keep_last_k: int | None = Field(None, gt=0, description="default: keep_last_k of the run config")
    keep_best: bool = Field(True, description="also keep the checkpoint with the lowest val loss")
    remove_partial: bool = Field(True, description="remove leftovers of interrupted saves first")


def describe(p: PruneParams, state) -> str:
    k = p.keep_last_k or "config.keep_last_k"
    return (f"{'remove partial saves, then ' if p.remove_partial else ''}delete checkpoints except the newest {k}"
            f"{' and the best' if p.keep_best else ''} (never the newest verified one nor the resume point)")


def apply(p: PruneParams, rt) -> ActionResult:
    return ActionResult(True, rt.prune(p.keep_last_k, p.keep_best, p.remove_partial))


ACTION = ActionDef(
    "prune_checkpoints", PruneParams,
    "Free disk in out_dir: remove partial saves and old step checkpoints (only those this run's trainer saved), "
    "keeping best + newest keep_last_k.",
    describe, apply, example={"prune_checkpoints": {"keep_last_k": 2}},
)
