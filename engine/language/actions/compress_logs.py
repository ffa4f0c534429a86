from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.core.log_compression import compress_finished_logs
from engine.core.state import StateSnapshot


class CompressLogsParams(Params):
    min_bytes: int = Field(0, ge=0, description="only logs at least this large")


def describe(p: CompressLogsParams, state: StateSnapshot) -> str:
    return "gzip the trainer logs of earlier launches and old metrics files in the run folder"


def apply(p: CompressLogsParams, ports: ActionPorts) -> ActionResult:
    process = ports.trainer.process
    count, saved = compress_finished_logs(ports.loaded.folder.logs, process.log_path if process else None,
                                          ports.trainer.alive, p.min_bytes)
    return ActionResult(True, f"compressed {count} log(s), saved {saved / 1e6:.2f} MB")


ACTION = ActionDef(
    "compress_logs", CompressLogsParams, "gzip finished trainer logs to free disk.",
    describe, apply, example={"compress_logs": {}},
)
