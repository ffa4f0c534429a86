"""Delivering the Slack notices a watcher left in `<run_dir>/outbox/` (Slack was down when it ended).

Used by `runbook notify --flush` and by `runbook watch` on a run that already ended. The outbox
keeps each incident's thread ts in its state.json, so replies still land in their threads. Takes
the run folder's lock: one process per outbox, or two could send the same message.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from runbook.exit_codes import ExitCode
from runbook.outbox import pending_summary


class NoticesRefused(Exception):
    def __init__(self, code: ExitCode, message: str):
        self.code = code
        super().__init__(message)


def outbox_dir(loaded) -> Path:
    return loaded.folder.outbox


def pending(loaded) -> int:
    return pending_summary(outbox_dir(loaded))["pending"]


def deliver_pending(loaded, timeout_s: float | None = None, environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """(delivered, still pending) after delivering for at most ``timeout_s`` (default: delivery_timeout_s)."""
    from engine.core.lock import RunLock, RunLocked
    from runbook.slack import make_notifier

    summary = pending_summary(outbox_dir(loaded))
    before, parked_before = summary["pending"], summary["parked"]
    if not before:
        return 0, 0
    settings = loaded.config.notifications.slack
    if not settings.enabled:
        raise NoticesRefused(ExitCode.BAD_CONFIG, f"{before} notice(s) wait in {outbox_dir(loaded)} but "
                             f"notifications.slack.enabled is false in {loaded.path}; enable it to deliver them")
    lock = RunLock(loaded.run_dir)
    try:
        lock.acquire()
    except RunLocked as locked:
        raise NoticesRefused(ExitCode.LOCKED, f"{locked} (that watcher delivers the notices itself)") from None
    try:
        try:
            notifier = make_notifier(settings, outbox_dir(loaded), environ)
        except ValueError as error:   # no token variable, no channel
            raise NoticesRefused(ExitCode.BAD_CONFIG, str(error)) from None
        notifier.close(settings.delivery_timeout_s if timeout_s is None else timeout_s)
    finally:
        lock.release()
    after = pending_summary(outbox_dir(loaded))
    left = after["pending"]   # set aside (malformed, rejected: outbox/failed/, logged) is not delivered
    return max(0, before - left - max(0, after["parked"] - parked_before)), left
