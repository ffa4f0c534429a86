"""One receiver's delivery: notices appended to a durable outbox by the caller, delivered strictly in
order by one daemon thread, retried with backoff while the receiver is unreachable. Slack, the generic
webhook and e-mail differ only in `_deliver` (how one stored notice leaves).

Callers only append and return: a notice never stands in a recovery's way. A full disk keeps notices
in memory, in order, until they can be stored or delivered. Delivery is at-least-once: a crash between
the receiver's answer and the outbox bookkeeping resends.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

from runbook.outbox import Outbox


class Retry(Exception):
    """The receiver is down or refused for now: keep the notice queued, nothing behind it overtakes it."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


class Reject(Exception):
    """The receiver will never accept this notice: park it in outbox/failed/."""


class OutboxSender:
    label = "receiver"   # in log lines: "slack: ...", "webhook ops: ..."

    def __init__(self, outbox_dir: Path, check: Callable[[Any], str | None] | None, *, backoff_s: float = 1.0,
                 max_backoff_s: float = 60.0, close_timeout_s: float = 5.0, join_timeout_s: float = 4.0) -> None:
        self._backoff_s, self._max_backoff_s, self._close_timeout_s = backoff_s, max_backoff_s, close_timeout_s
        self._join_timeout_s = join_timeout_s
        self._log = logging.getLogger(type(self).__module__)   # the receiver's own logger (Slack filters its secrets)
        self._outbox = Outbox(outbox_dir, check=check)
        # Notices a full disk kept out of the outbox, oldest first: stored ahead of newer ones once space
        # returns, or delivered straight from memory when the outbox is empty and the disk still full.
        self._held: list[dict[str, Any]] = []
        self._held_lock = threading.Lock()
        self._sending_held = False
        self._held_said = False   # the outage was logged once
        self._wake = threading.Event()  # something was queued
        self._kick = threading.Event()  # cut the current backoff short (flush/close)
        self._stop = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"runbook-{self.label}", daemon=True)
        self._thread.start()

    def _deliver(self, message: dict[str, Any]) -> None:
        """Send one stored notice; raise Retry or Reject when it did not arrive."""
        raise NotImplementedError

    def _closed_hook(self) -> None:
        """Runs once the sender thread has ended (Slack removes its log filters)."""

    # -- caller's thread ------------------------------------------------------

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until the outbox is empty (or ``timeout_s`` passes); cuts a running backoff short."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._kick.set()
        while self.pending_count() and self._thread.is_alive():
            if deadline is not None and time.monotonic() >= deadline:
                self._log.info("%s: %d message(s) still queued in %s", self.label, len(self._outbox), self._outbox.dir)
                return
            time.sleep(0.01)

    def close(self, timeout_s: float | None = None) -> None:
        """Bounded final flush, then stop the sender; undelivered messages stay on disk."""
        if self._closed:
            return
        self._closed = True
        self.flush(self._close_timeout_s if timeout_s is None else timeout_s)
        self._stop.set()
        self._wake.set()
        self._kick.set()
        self._thread.join(timeout=self._join_timeout_s)
        with self._held_lock:
            self._store_held()
            if self._held:
                self._log.error("%s: %d notice(s) could neither be written to %s (full disk) nor delivered; they are lost",
                          self.label, len(self._held), self._outbox.dir)
        if not self._thread.is_alive():  # a still-running request may yet log
            self._closed_hook()

    def pending_count(self) -> int:
        return len(self._outbox) + len(self._held)

    def _queue(self, message: dict[str, Any]) -> None:
        with self._held_lock:
            self._held.append(message)
            self._store_held()
        self._wake.set()

    def _store_held(self) -> None:
        """Move held notices into the outbox in order (the caller holds _held_lock); a full disk keeps them."""
        while self._held and not self._sending_held:
            try:
                self._outbox.put(self._held[0])
            except Exception as exc:  # e.g. disk full: a held notice beats breaking a recovery
                if not self._held_said:   # said once per outage, not once per notice
                    self._held_said = True
                    self._log.error("%s: could not write the outbox %s (%s); keeping notices in memory, in order, "
                              "until it can be written or they are delivered", self.label, self._outbox.dir, exc)
                return
            self._held.pop(0)
        if not self._held and self._held_said:
            self._held_said = False
            self._log.warning("%s: the outbox %s can be written again; no notice is held in memory", self.label,
                        self._outbox.dir)

    # -- sender thread --------------------------------------------------------

    def _deliver_held(self) -> bool:
        """The outbox is empty but notices wait in memory (the disk is still full): send the oldest."""
        with self._held_lock:
            self._store_held()
            if not self._held or len(self._outbox):
                return False
            message, self._sending_held = self._held[0], True
        try:
            self._deliver(message)
        except Reject as exc:
            self._log.error("%s: rejected a held %s message for incident %s (%s); dropped it",
                      self.label, message.get("kind"), message.get("incident_id"), exc)
        finally:
            with self._held_lock:
                self._sending_held = False
        with self._held_lock:   # delivered or rejected: either way it is done (a Retry propagated above)
            if self._held and self._held[0] is message:
                self._held.pop(0)
        return True

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._wake.clear()
                items = self._outbox.pending()
                if not items:
                    if self._held:
                        if self._deliver_held():
                            continue
                        self._wake.wait(timeout=1.0)   # the outbox may become writable: try again soon
                        continue
                    self._wake.wait(timeout=60.0)
                    continue
                for msg_id, message in items:
                    if self._stop.is_set():
                        return
                    self._kick.clear()
                    try:
                        self._deliver(message)
                    except Reject as exc:
                        self._log.error("%s: rejected %s message %s for incident %s (%s); moved to %s/failed", self.label,
                                  message.get("kind"), msg_id, message.get("incident_id"), exc, self._outbox.dir)
                        self._outbox.park(msg_id)
                        continue
                    self._outbox.done(msg_id)
                    if failures:
                        self._log.info("%s: delivering again after %d failed attempt(s)", self.label, failures)
                        failures = 0
            except Exception as exc:  # never let the sender die
                failures += 1
                delay = min(self._max_backoff_s, self._backoff_s * 2 ** min(failures - 1, 30))
                delay = max(delay, getattr(exc, "retry_after", None) or 0.0)
                if not isinstance(exc, Retry):
                    self._log.exception("%s: unexpected error in sender thread", self.label)
                elif failures & (failures - 1) == 0:  # attempts 1, 2, 4, 8, ... of an outage
                    self._log.warning("%s: delivery failed %d time(s) (%s); %d queued, retrying in %.1fs",
                                self.label, failures, exc, len(self._outbox), delay)
                self._kick.wait(delay)
