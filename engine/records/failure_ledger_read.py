"""Reading run folders for the failure ledger: which folders are runs, their records, and the figures
each record implies (engine/records/failure_ledger.py builds the table from them).

Every read is bounded: a folder walk stops at a depth and a count, a record that is not a regular file
of sane size is left out with a sentence (a FIFO named incident-3.json would block a plain read), and
records are then read by the one incident reader (engine/records/incident_store.py).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from engine.core.bounded_read import MAX_FILE_BYTES, read_text_file, shown
from engine.records.failure_ledger import LedgerEntry
from engine.records.incident_store import BadIncidentRecord, IncidentStore, IncidentsUnreadable
from engine.records.run_log_entry import skipped_words
from engine.core.run_folder import RunFolder
from engine.records.signature import signature_of_record
from engine.core.yaml_source import SourceError

MAX_DEPTH = 4              # team/project/runs/pretrain
MAX_RUN_FOLDERS = 1000
MAX_EXIT_STATUS_BYTES = 64 * 1024
MAX_DETECTION_S = 86400.0  # an exit time further back than a day is not this incident's


def run_folders(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """The run folders (those with an `incidents/` folder) at or under each path, and a sentence per path with none."""
    found: list[Path] = []
    problems: list[str] = []
    for path in paths:
        before = len(found)
        if not path.is_dir():
            problems.append(f"{shown(path)}: not a folder")
            continue
        for root, dirs, _ in os.walk(path, followlinks=False):
            depth = len(Path(root).relative_to(path).parts)
            if "incidents" in dirs and (Path(root) / "incidents").is_dir():
                found.append(Path(root))
                dirs[:] = []          # a run folder's own subfolders hold no runs
            elif depth >= MAX_DEPTH or len(found) >= MAX_RUN_FOLDERS:
                dirs[:] = []
            else:
                dirs.sort()
        if len(found) == before:
            problems.append(f"{shown(path)}: no run folder (one with incidents/) at or under it")
    unique = list(dict.fromkeys(p.resolve() for p in found))
    return unique[:MAX_RUN_FOLDERS], problems


def _usable_file(path: Path) -> str | None:
    try:
        info = os.stat(path)
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_size > MAX_FILE_BYTES:
        return f"is {info.st_size:,} bytes, more than a record may have"
    return None


def read_records(run_dir: Path) -> tuple[list[dict], list[str]]:
    store = IncidentStore(run_dir)
    records, problems = [], []
    try:
        ids = store.ids()
    except IncidentsUnreadable as error:
        return [], [str(error)]
    for incident_id in ids:
        path = store.path(incident_id)
        if (reason := _usable_file(path)) is not None:
            problems.append(f"{shown(path)} {reason}; left it out")
            continue
        try:
            records.append(store.read(incident_id).to_json())
        except BadIncidentRecord as bad:
            problems.append(f"{bad}; left it out")
    return records, problems


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def exit_time(run_dir: Path, launch: int) -> float | None:
    """When the launch's trainer ended, as its launcher wrote it (None when unknown or unreadable)."""
    if launch < 1:
        return None
    try:
        status = json.loads(read_text_file(RunFolder(run_dir).exit_status(launch), MAX_EXIT_STATUS_BYTES))
    except (SourceError, ValueError, RecursionError):
        return None
    return _number(status.get("ended")) if isinstance(status, dict) else None


def detection_seconds(record: dict, run_dir: Path) -> float | None:
    snapshot = v if isinstance(v := record.get("snapshot"), dict) else {}
    trainer = v if isinstance(v := snapshot.get("trainer"), dict) else {}
    detected = _number(record.get("detected_at"))
    if trainer.get("alive"):
        since = _number(snapshot.get("seconds_since_progress"))
        return round(since, 3) if since is not None and 0 < since <= MAX_DETECTION_S else None
    launches = trainer.get("launches")
    if detected is None or not isinstance(launches, int) or isinstance(launches, bool):
        return None
    ended = exit_time(run_dir, launches)
    if ended is None or not 0 <= detected - ended <= MAX_DETECTION_S:
        return None
    return round(detected - ended, 3)


def device_hours(record: dict) -> tuple[float | None, str]:
    """devices x (recovery time + the lost tokens at the run's tokens/s), in hours; and gpu/cpu."""
    config = v if isinstance(v := record.get("config_before"), dict) else {}
    trainer = v if isinstance(v := config.get("trainer"), dict) else {}
    devices = v if isinstance(v := trainer.get("devices"), int) and v > 0 else 1
    kind = "gpu" if trainer.get("device") == "cuda" else "cpu"
    metrics = (record.get("snapshot") or {}).get("metrics") if isinstance(record.get("snapshot"), dict) else None
    rate = _number((metrics or {}).get("tokens_per_sec")) if isinstance(metrics, dict) else None
    seconds, known = 0.0, False
    recovery = _number(record.get("recovery_seconds"))
    if recovery is not None and record.get("outcome") == "recovered" and recovery >= 0:
        seconds, known = seconds + recovery, True
    tokens = _number(record.get("tokens_lost"))
    if tokens is not None and tokens > 0 and rate and rate > 0:
        seconds, known = seconds + tokens / rate, True
    return (round(devices * seconds / 3600, 6) if known else None), kind


def ledger_entries(run_dir: Path, label: str) -> tuple[list[LedgerEntry], list[str]]:
    records, problems = read_records(run_dir)
    entries = []
    for record in records:
        sig = signature_of_record(record)
        hours, kind = device_hours(record)
        steps, tokens = record.get("steps_lost"), record.get("tokens_lost")
        entries.append(LedgerEntry(
            run=label, incident=str(record.get("id")), playbook=str(record.get("playbook")),
            outcome=str(record.get("outcome")), signature=sig.id if sig else "none",
            signature_text=sig.text if sig else "no recorded state",
            detection_s=detection_seconds(record, run_dir),
            recovery_s=_number(record.get("recovery_seconds")),
            steps_lost=steps if isinstance(steps, int) and steps >= 0 else None,
            tokens_lost=tokens if isinstance(tokens, int) and tokens >= 0 else None,
            device_hours=hours, device_kind=kind, tokens_skipped=_skipped_tokens(record),
            data_skipped=skipped_words(record)))
    return entries, problems


def _skipped_tokens(record: dict) -> int:
    skipped = record.get("data_skipped")
    tokens = skipped.get("tokens") if isinstance(skipped, dict) else None
    return tokens if isinstance(tokens, int) and tokens >= 0 else 0


__all__ = ["detection_seconds", "device_hours", "exit_time", "ledger_entries", "read_records", "run_folders"]
