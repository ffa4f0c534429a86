"""A checkpoint runbook no longer trusts (the trust chain, engine/language/actions/rollback): marked in its
manifest, its files left where they are, and read back from the quarantine for `runbook verify`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from engine.core.bounded_read import read_json_record
from engine.core.durable import atomic_write
from engine.core.errors import SourceError

from engine.checkpoints.store import MANIFEST_NAME, Checkpoint, list_entries, own_tmp_prefix


def suspect_reason(ckpt: Checkpoint) -> str | None:
    """Why runbook no longer trusts this checkpoint (its manifest's `suspect`, mark_suspect), or None: unmarked,
    unsealed, or a manifest it cannot read (verify says what is wrong with that)."""
    try:
        record = read_json_record(ckpt.path / MANIFEST_NAME, name=MANIFEST_NAME)
    except (OSError, SourceError):
        return None
    suspect = record.get("suspect") if isinstance(record, dict) else None
    reason = suspect.get("reason") if isinstance(suspect, dict) else None
    return reason if isinstance(reason, str) else None


def quarantined_suspects(quarantine_dir: Path, limit: int = 1000) -> list[tuple[str, str]]:
    """(folder name, why) of the checkpoints moved to the quarantine as suspect (mark_suspect's manifests), by name;
    at most `limit` folders are looked at (a quarantine is the run's own, but may be large)."""
    try:
        folders = sorted(e.name for e in list_entries(Path(quarantine_dir)) if e.is_dir(follow_symlinks=False))[:limit]
    except OSError:
        return []
    found = []
    for name in folders:
        try:
            record = read_json_record(Path(quarantine_dir) / name / MANIFEST_NAME, name=MANIFEST_NAME)
        except (OSError, SourceError):
            continue
        suspect = record.get("suspect") if isinstance(record, dict) else None
        if isinstance(suspect, dict) and isinstance(suspect.get("reason"), str):
            found.append((name, suspect["reason"]))
    return found


def mark_suspect(ckpt: Checkpoint, reason: str) -> bool:
    """Record in the checkpoint's manifest why it is suspect: its files stay where they are (a human may still
    want them), runbook only stops resuming from it. False: it has no readable manifest to mark (unsealed)."""
    try:
        record = read_json_record(ckpt.path / MANIFEST_NAME, name=MANIFEST_NAME)
    except (OSError, SourceError):
        return False
    if not isinstance(record, dict):
        return False
    record["suspect"] = {"reason": reason, "marked_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    data = json.dumps(record, indent=1).encode() + b"\n"
    atomic_write(ckpt.path / MANIFEST_NAME, lambda f: f.write(data), prefix=own_tmp_prefix(ckpt.path.parent))
    return True
