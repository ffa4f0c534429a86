from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.core.state import StateSnapshot
from engine.observe.diagnosis import report
from engine.observe.slowness_sampling import sample


class DiagnoseParams(Params):
    sample_seconds: float = Field(3.0, gt=0, le=60, description="how long to sample CPU and I/O")


def describe(p: DiagnoseParams, state: StateSnapshot) -> str:
    return (f"sample the machine for {p.sample_seconds:g} s: the trainer's ranks and data workers, other processes' "
            "CPU (pids, commands), cgroup throttling, steal, iowait, stopped ranks, each rank's own work per micro-batch, the "
            "data folder's read speed; say which one slows the run")


def apply(p: DiagnoseParams, ports: ActionPorts) -> ActionResult:
    import psutil


    trainer, loaded = ports.trainer.process, ports.loaded
    if trainer is None or not trainer.alive:
        return ActionResult(False, "no live trainer to sample (it ended during the incident; the playbook that "
                                   "matches its end takes it from here)", {})
    ranks = ports.state.trainer.ranks
    try:
        samples = sample(
            trainer.pid, p.sample_seconds, num_workers=loaded.config.trainer.num_workers,
            rank_pids={r.rank: r.pid for r in ranks.ranks if r.pid is not None} or None,
            rank_work_seconds={r.rank: r.work_seconds for r in ranks.ranks if r.work_seconds is not None},
            data_dir=loaded.data_path("train_dir"))
    except psutil.Error as error:
        return ActionResult(False, f"could not sample the trainer: {error}", {})
    found = report(samples)
    ports.incident.diagnosis = found
    ports.note(found["verdict"])
    return ActionResult(True, found["verdict"], found)


ACTION = ActionDef(
    "diagnose_slowness", DiagnoseParams,
    "Find out why training is slow (a stopped or straggling rank, cgroup throttling, steal, other processes "
    "taking the CPU, storage, a starved data loader) with the figures sampled.",
    describe, apply, example={"diagnose_slowness": {"sample_seconds": 3}},
)
