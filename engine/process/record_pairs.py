"""`<prefix>-N.json` records that ranks and node agents write beside the trainer: read in bounds."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from engine.core.bounded_read import parse_json_record

Record = TypeVar("Record", bound=BaseModel)

MAX_FILE_BYTES = 64 * 1024   # a record is a few hundred bytes; anything bigger is not one


def _read(path: Path, model: type[Record]) -> Record | None:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            return None
        return model.model_validate(parse_json_record(data, str(path)))   # 100,000 `[`: passed over, no RecursionError
    except (OSError, ValueError, ValidationError):
        return None


def read_record_pairs(folder: Path | None, prefix: str, live_model: type[BaseModel], exit_model: type[BaseModel],
                      number: str, limit: int) -> tuple[dict, dict]:
    """`<prefix>-N.json` (live) and `<prefix>-N.exit.json` records of a folder, by their number field; a bad,
    foreign or misnamed file is passed over, and at most 2 x limit files are read."""
    live: dict = {}
    exits: dict = {}
    if folder is None or not Path(folder).is_dir():
        return live, exits
    for path in sorted(Path(folder).glob(f"{prefix}-*.json"))[:2 * limit]:
        ended = path.name.endswith(".exit.json")
        record = _read(path, exit_model if ended else live_model)
        if record is None:
            continue
        n = getattr(record, number)
        if path == Path(folder) / f"{prefix}-{n}{'.exit' if ended else ''}.json":
            (exits if ended else live)[n] = record
    return live, exits
