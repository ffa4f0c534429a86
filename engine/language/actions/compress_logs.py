from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionResult, Params


class CompressLogsParams(Params):
    min_bytes: int = Field(0, ge=0, description="only logs at least this large")


def describe(p: CompressLogsParams, state) -> str:
    return "gzip the trainer logs of earlier launches and old metrics files in the run folder"


def apply(p: CompressLogsParams, rt) -> ActionResult:
    return ActionResult(True, rt.compress_logs(p.min_bytes))


ACTION = ActionDef(
    "compress_logs", CompressLogsParams, "gzip finished trainer logs to free disk.",
    describe, apply, example={"compress_logs": {}},
)
