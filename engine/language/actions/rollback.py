from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.core.state import StateSnapshot


class RollbackParams(Params):
    steps: int = Field(0, ge=0, description="roll back to a checkpoint at least this many steps before the first bad step")
    bad_step: int | None = Field(
        None, ge=0, description="first bad optimizer step (default: the step of the failure); an expression "
        "such as \"{{ state.metrics.last_healthy_step }}\" renders to a number"
    )
    scan_nonfinite: bool = Field(True, description="also quarantine checkpoints whose weights hold NaN/Inf")


def describe(p: RollbackParams, state: StateSnapshot) -> str:
    bad = p.bad_step if p.bad_step is not None else "the failing step"
    return (f"quarantine every checkpoint at or after {bad}"
            f"{' and any with non-finite weights' if p.scan_nonfinite else ''}; "
            f"the newest clean checkpoint at least {p.steps} steps earlier becomes the resume point")


def apply(p: RollbackParams, ports: ActionPorts) -> ActionResult:
    trainer, incident = ports.trainer, ports.incident
    if trainer.alive:
        trainer.stop("rollback")
    bad_step = int(p.bad_step) if p.bad_step is not None else (ports.state.metrics.step or 0)
    ports.effects.bad_step = bad_step   # a skip_data after it skips from the resume point to past this
    ports.journal.append("divergence_rollback", incident=incident.id, bad_step=bad_step)
    ports.session.divergences.append(bad_step)   # the next divergence's state.metrics.previous_bad_step
    suspect = distrust_resume_point(ports, bad_step)
    result = ports.checkpoints.rollback(bad_step, p.steps, p.scan_nonfinite, f"rollback ({incident.id})")
    target = result.target
    incident.rollback_target_step = target.step if target else 0
    where = f"step {target.step}" if target else "the start (no clean checkpoint left)"
    # what moved, and why
    return ActionResult(True, (f"{suspect}; " if suspect else "") + f"{result.summary()}; next resume from {where}")


def distrust_resume_point(ports: ActionPorts, bad_step: int) -> str | None:
    """The checkpoint C this launch resumed from, when the divergence began within watch.suspect_within_steps
    (default: save_interval) after C: C may hold the poison (a rollback to it would diverge again), so it is
    marked suspect (moved to the quarantine, its manifest saying why) and the rollback's resume point is older
    (marin#5386: 8k steps lost to a poisoned fallback)."""
    catalog, config = ports.checkpoints, ports.loaded.config
    resumed_from = ports.journal.replay().resumed_from
    step = catalog.layout.step_in_path(resumed_from) if resumed_from else None
    within = config.watch.suspect_within_steps or config.save_interval
    if step is None or not step < bad_step <= step + within:
        return None
    reason = (f"the divergence began at step {bad_step}, {bad_step - step} step(s) after resuming from it "
              f"({ports.incident.id}, within watch.suspect_within_steps {within})")
    moved = catalog.mark_suspect(step, reason)
    if moved is None:
        return None
    ports.note(f"checkpoint {step} marked suspect: {reason}; moved to {moved}, later resumes choose an older one")
    return f"checkpoint {step} marked suspect (moved to the quarantine)"


ACTION = ActionDef(
    "rollback", RollbackParams,
    "Quarantine checkpoints saved at/after the first bad step (and any with non-finite weights) so the next "
    "resume starts from the newest clean checkpoint far enough before it. Never deletes.",
    describe, apply, example={"rollback": {"steps": 20}},
)
