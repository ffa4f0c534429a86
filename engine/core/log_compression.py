"""gzip the trainer logs no trainer writes any more: the one way both the compress_logs action and upkeep's
gzip_logs job free a run folder's logs (each file atomically through durable.gzip_replace: this runs on a
full disk)."""

from __future__ import annotations

from pathlib import Path

from engine.core.durable import gzip_replace


def compress_finished_logs(logs_dir: Path, current: Path | None, trainer_alive: bool,
                           min_bytes: int = 0) -> tuple[int, int]:
    """(logs compressed, bytes saved). Spared: the log the live trainer writes (`current`), and while a
    trainer lives the newest log too (belt and braces: an attached trainer's log may not be `current`),
    and logs under min_bytes."""
    logs = sorted(p for p in logs_dir.glob("*.log") if p.is_file())
    live = {p.resolve() for p in [current] if p is not None}
    if trainer_alive and logs:
        live.add(max(logs, key=lambda p: p.stat().st_mtime).resolve())
    count, saved = 0, 0
    for log in logs:
        if log.resolve() in live or log.stat().st_size < min_bytes:
            continue
        saved += gzip_replace(log)
        count += 1
    return count, saved
