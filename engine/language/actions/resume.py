from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, model_validator

from engine.language.actions.base import ActionDef, ActionFailed, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.core.state import StateSnapshot


class ResumeParams(Params):
    source: Literal["newest_verified", "step"] = Field(
        "newest_verified", alias="from", description="which checkpoint to resume from"
    )
    step: int | None = Field(None, ge=0, description="with from: step, the optimizer step to resume from")

    @model_validator(mode="after")
    def _step_given(self, info: ValidationInfo) -> "ResumeParams":
        # At load an expression supplies `step` later (validate_params names such keys in the context).
        computed = (info.context or {}).get("computed", ())
        if self.source == "step" and self.step is None and "step" not in computed:
            raise ValueError("from: step needs `step`, the optimizer step to resume from")
        return self


def describe(p: ResumeParams, state: StateSnapshot) -> str:
    if p.source == "step":
        return f"restart the trainer from checkpoint step {p.step}"
    return "restart the trainer from the newest verified checkpoint (from scratch if none)"


def apply(p: ResumeParams, ports: ActionPorts) -> ActionResult:
    kept = keep_launch_made_before_restart(ports)
    if kept is not None:
        return kept
    trainer, catalog, incident = ports.trainer, ports.checkpoints, ports.incident
    if trainer.alive:
        trainer.stop("restart for resume")
    # Verify everything again right before resuming (a file can rot after it was sealed), unless
    # verify_checkpoints just did: with 10 GB checkpoints a second full read costs minutes.
    catalog.refresh(quarantine_corrupt=True, force=not ports.effects.verified_all)
    if p.source == "step":
        chosen = next((c for c in catalog.checkpoints() if c.step == p.step and c.step in catalog.verified), None)
        if chosen is None:
            raise ActionFailed(f"no verified checkpoint at step {p.step}")
    else:
        chosen = catalog.newest_verified()
    resume_file, detail = None, "from scratch (no verified checkpoint)"
    if chosen is not None:
        loaded = ports.loaded
        plan = trainer.adapter.prepare_resume(chosen, loaded, loaded.folder.resume)
        resume_file, detail = plan.file, plan.detail
        if plan.note:
            ports.note(plan.note)
        incident.resumed_from = str(catalog.layout.resume_file(chosen.path))
        incident.resumed_step = chosen.step
    else:
        incident.resumed_step = 0
    ports.session.launch(resume_file)   # the session starts the trainer and follows its log
    ports.effects.resumed = True
    return ActionResult(True, f"relaunched trainer {detail}")


def keep_launch_made_before_restart(ports: ActionPorts) -> ActionResult | None:
    """This step, run again by a restarted watcher, when the killed one had launched the trainer in it but died
    before journaling the step done: the journal's newest launch belongs to the open incident after its last
    finished action, and the restarted watcher re-attached to it (startup.py). That launch is this step's
    effect: kept, not stopped and made again (a relaunch lost, and a trainer stopped in its start-up)."""
    past = ports.journal.replay()
    process = ports.trainer.process
    if past.launch_since_last_action is None or process is None or process.pid != past.trainer_pid:
        return None
    step = ports.checkpoints.layout.step_in_path(past.resumed_from) if past.resumed_from else None
    if past.resumed_from and step is None:
        return None   # a resume file whose step cannot be told: resume again, as before
    ports.incident.resumed_from = past.resumed_from
    ports.incident.resumed_step = step if step is not None else 0
    ports.effects.resumed = True
    state = "running" if process.alive else "already ended (the watch loop judges its exit)"
    detail = f"from {past.resumed_from}" if past.resumed_from else "from scratch"
    ports.note(f"the watcher restarted after this step had launched the trainer (launch {past.launch_since_last_action}, "
               f"pid {process.pid}, {state}): that launch was kept, not made again")
    return ActionResult(True, f"relaunched trainer {detail} (launch {past.launch_since_last_action}, kept across a "
                              "watcher restart)")


ACTION = ActionDef(
    "resume", ResumeParams,
    "Restart the trainer from a verified checkpoint. The current run config is used; when micro_batch_size "
    "changed since the checkpoint, a rescaled copy keeps the token budget and lr schedule exact.",
    describe, apply, example={"resume": {"from": "newest_verified"}},
)
