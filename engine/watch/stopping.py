"""The watcher asked to stop (SIGTERM/SIGINT to it, a cloud notice, a scheduler's notice), or the run
escalated: forward the notice so the trainer finishes its step and saves, wait up to grace_period_s for
that save, then stop whatever still runs. The save is sealed now: the next watch resumes from it.

An escalation stops its trainer too: left running, a diverged trainer trained on unsupervised to final/
while the run said "escalated", and nobody watched what it wrote into out_dir."""

from __future__ import annotations

from engine.checkpoints.catalog import CheckpointCatalog
from engine.cluster.slurm_watch import SlurmAllocation
from engine.process.trainer_control import TrainerControl
from engine.records.journal import Journal


def stop_on_request(why: str, control: TrainerControl, journal: Journal, catalog: CheckpointCatalog,
                    slurm: SlurmAllocation | None = None) -> str:
    """What was done, for the transition to STOPPED."""
    noticed = None
    if control.alive and control.process is not None:
        noticed = control.process.give_notice(control.loaded.config.watch.grace_period_s)
        if noticed:
            journal.append("trainer_noticed", pid=control.process.pid, reason=why, detail=noticed)
    if slurm is not None:   # why (scontrol) after the save: a slow controller never delays the save
        slurm.noticed(why)
    detail = control.stop(why) if control.alive else noticed or "no trainer running"
    if noticed:
        catalog.refresh(force=True)
    return detail
