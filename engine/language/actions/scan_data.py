from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionResult, Params


class ScanDataParams(Params):
    max_tokens_per_line: int = Field(100_000, gt=0, description="lines longer than this are reported")


def describe(p: ScanDataParams, state) -> str:
    return f"scan the training text for undecodable lines and lines over {p.max_tokens_per_line} tokens"


def apply(p: ScanDataParams, rt) -> ActionResult:
    return ActionResult(True, rt.scan_data(p.max_tokens_per_line))


ACTION = ActionDef(
    "scan_data", ScanDataParams, "Scan the training data with the run's tokenizer and report bad lines.",
    describe, apply, example={"scan_data": {}},
)
