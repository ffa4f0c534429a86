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
    folder = Path(folder)

    def take(path: Path) -> None:
        ended = path.name.endswith(".exit.json")
        record = _read(path, exit_model if ended else live_model)
        if record is None:
            return
        n = getattr(record, number)
        if path == folder / f"{prefix}-{n}{'.exit' if ended else ''}.json":
            (exits if ended else live)[n] = record

    for path in sorted(folder.glob(f"{prefix}-*.json"))[:2 * limit]:
        take(path)
    # A record is renamed over at every micro-batch (a heartbeat), so one pass can miss it: at CI a read found no
    # rank-0.json while the file was there all along (rank 1 at step 7 of the same group). Every number up to
    # the highest known (or the world size a record states) not found is opened by name a second time.
    known = set(live) | set(exits)
    world = max((getattr(r, "world_size", 0) or 0 for r in live.values()), default=0)
    for n in range(min(max(max(known, default=-1) + 1, world), limit)):
        for suffix in (".json", ".exit.json"):
            if n not in (exits if suffix == ".exit.json" else live):
                take(folder / f"{prefix}-{n}{suffix}")
    return live, exits
