from __future__ import annotations

from pydantic import Field

from engine.actions.base import ActionDef, ActionResult, Params


class DiagnoseParams(Params):
    sample_seconds: float = Field(3.0, gt=0, le=60, description="how long to sample CPU and I/O")


def describe(p: DiagnoseParams, state) -> str:
    return (f"sample the trainer for {p.sample_seconds:g} s: its CPU vs its data workers', stopped time, "
            "iowait, read speed of the data folder, num_workers; say what is slow")


def apply(p: DiagnoseParams, rt) -> ActionResult:
    from engine.diagnosis import diagnose_slowness

    report = diagnose_slowness(rt.trainer, rt.loaded, p.sample_seconds)
    rt.record_diagnosis(report)
    rt.note(report["verdict"])
    return ActionResult(True, report["verdict"], report)


ACTION = ActionDef(
    "diagnose_slowness", DiagnoseParams,
    "Find out why training is slow (throttled trainer, saturated data workers, storage, iowait) with evidence.",
    describe, apply, example={"diagnose_slowness": {"sample_seconds": 3}},
)
