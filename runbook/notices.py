"""Delivering the notices a watcher left in `<run_dir>/outbox/` (the legacy `slack:` receiver's) and
`<run_dir>/outbox/<receiver>/` (a receiver was down when it ended).

Used by `runbook notify --flush` and by `runbook watch` on a run that already ended. Slack's outbox
keeps each incident's thread ts in its state.json, so replies still land in their threads. Takes
the run folder's lock: one process per outbox, or two could send the same message.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from engine.core.config import LoadedConfig
from runbook.exit_codes import ExitCode
from runbook.outbox import pending_summary


class NoticesRefused(Exception):
    def __init__(self, code: ExitCode, message: str):
        self.code = code
        super().__init__(message)


def outbox_dir(loaded: LoadedConfig) -> Path:
    return loaded.folder.outbox


def summary(loaded: LoadedConfig) -> dict:
    """pending_summary over every outbox of the run (runbook/outbox.py): counts summed, the oldest kept."""
    from runbook.receivers import outbox_dirs

    folders = dict.fromkeys([outbox_dir(loaded), *outbox_dirs(loaded.config.notifications, outbox_dir(loaded))])
    each = [pending_summary(folder) for folder in folders]
    oldest = [s["oldest_queued_at"] for s in each if s["oldest_queued_at"] is not None]
    return {"pending": sum(s["pending"] for s in each), "parked": sum(s["parked"] for s in each),
            "oldest_queued_at": min(oldest, default=None)}


def pending(loaded: LoadedConfig) -> int:
    return summary(loaded)["pending"]


def deliver_pending(loaded: LoadedConfig, timeout_s: float | None = None, environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """(delivered, still pending) after delivering for at most ``timeout_s`` (default: delivery_timeout_s)."""
    from engine.core.lock import RunLock, RunLocked
    from runbook.receivers import make_notifier

    waiting = summary(loaded)
    before, parked_before = waiting["pending"], waiting["parked"]
    if not before:
        return 0, 0
    settings = loaded.config.notifications
    if not settings.slack.enabled and not settings.receivers:
        raise NoticesRefused(ExitCode.BAD_CONFIG, f"{before} notice(s) wait in {outbox_dir(loaded)} but "
                             f"notifications.slack.enabled is false and no receiver is listed in {loaded.path}; "
                             "enable one to deliver them")
    lock = RunLock(loaded.run_dir)
    try:
        lock.acquire()
    except RunLocked as locked:
        raise NoticesRefused(ExitCode.LOCKED, f"{locked} (that watcher delivers the notices itself)") from None
    try:
        try:
            notifier = make_notifier(settings, outbox_dir(loaded), environ)
        except ValueError as error:   # no secret variable, no channel
            raise NoticesRefused(ExitCode.BAD_CONFIG, str(error)) from None
        bound = max([settings.slack.delivery_timeout_s] * settings.slack.enabled
                    + [r.delivery_timeout_s for r in settings.receivers])
        notifier.close(bound if timeout_s is None else timeout_s)
    finally:
        lock.release()
    after = summary(loaded)
    left = after["pending"]   # set aside (malformed, rejected: outbox/failed/, logged) is not delivered
    return max(0, before - left - max(0, after["parked"] - parked_before)), left
