from __future__ import annotations

from pydantic import Field

from engine.language.actions.base import ActionDef, ActionResult, Params
from engine.language.actions.ports import ActionPorts
from engine.datascan.scan import DataScanError, scan_folder
from engine.core.state import StateSnapshot


class ScanDataParams(Params):
    max_tokens_per_line: int = Field(100_000, gt=0, description="lines longer than this are reported")


def describe(p: ScanDataParams, state: StateSnapshot) -> str:
    return f"scan the training text for undecodable lines and lines over {p.max_tokens_per_line} tokens"


def apply(p: ScanDataParams, ports: ActionPorts) -> ActionResult:
    loaded = ports.loaded
    if loaded.config.data.kind == "data-module":
        raise DataScanError("this run reads its data through the trainer's own data module (data.kind: "
                            "data-module); runbook scans only folders of .txt files")
    # a trainer with its own tokenizer (kind script, hf-trainer) and no tokenizer.json: lengths in bytes
    report = scan_folder(loaded.data_path("train_dir"), loaded.data_path("tokenizer_dir"), p.max_tokens_per_line,
                         bytes_without_tokenizer=loaded.config.trainer.kind in ("script", "hf-trainer"))
    ports.incident.data_scan = report
    return ActionResult(True, report["summary"])


ACTION = ActionDef(
    "scan_data", ScanDataParams, "Scan the training data with the run's tokenizer and report bad lines.",
    describe, apply, example={"scan_data": {}},
)
