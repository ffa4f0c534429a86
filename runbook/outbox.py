"""A durable, ordered on-disk outbox plus a tiny persistent key-value state.

One JSON file per message, named by a zero-padded sequence number, so a plain
sorted directory listing is the delivery order and survives a process restart.
Every write goes temp file -> fsync -> os.replace -> fsync(dir): a crash leaves
either the complete file under its final name or only a ``.runbook-tmp-*.part`` leftover,
never a half-written message.

One Outbox per directory per process: sequence numbers are allocated under an
in-process lock, not a cross-process one.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any, Callable

from engine.core.bounded_read import read_json_record
from engine.core.durable import TMP_PREFIX, atomic_write

log = logging.getLogger(__name__)

_NAME_RE = re.compile(r"^(\d{12})\.json$")
STATE_FILE = "state.json"
FAILED_DIR = "failed"


def atomic_write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` so readers see the old or the new file, never a mix."""
    atomic_write(path, lambda f: f.write(json.dumps(data, ensure_ascii=False, sort_keys=True).encode("utf-8")))


class Outbox:
    """Ordered queue of JSON-able dicts persisted under ``directory``."""

    def __init__(self, directory: Path | str, check: Callable[[Any], str | None] | None = None) -> None:
        """``check``: why a message read back cannot be used (None: it can); such a message is moved to
        ``failed/`` with that reason instead of blocking every message queued behind it."""
        self.dir = Path(directory)
        self._check = check
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._remove_stale_temp_files()
        self._next_seq = max((int(m.group(1)) for m in self._matches()), default=0) + 1
        self._state: dict[str, Any] = self._load_state()

    # -- queue ---------------------------------------------------------------

    def put(self, message: dict[str, Any]) -> str:
        """Append ``message`` durably; returns its id (the sequence number as text)."""
        # The lock spans the write: a later sequence number must never become
        # visible before an earlier one, or the reader could deliver out of order.
        with self._lock:
            msg_id = f"{self._next_seq:012d}"
            atomic_write_json(self.dir / f"{msg_id}.json", message)
            self._next_seq += 1
        return msg_id

    def pending(self) -> list[tuple[str, dict[str, Any]]]:
        """All undelivered messages, oldest first."""
        items: list[tuple[str, dict[str, Any]]] = []
        for match in sorted(self._matches(), key=lambda m: m.group(1)):
            msg_id = match.group(1)
            path = self.dir / match.group(0)
            try:
                message = read_json_record(path)   # bounded: size, UTF-8, nesting (100,000 `[`)
            except FileNotFoundError:
                continue  # done() raced with the listing
            except (OSError, ValueError) as exc:   # SourceError is a ValueError: one sentence naming the file
                # Bit rot or a hand edit (writes are atomic); park it so it cannot block everything
                # queued behind it.
                self.park(msg_id, f"unreadable: {exc}")
                continue
            if self._check is not None and (problem := self._check(message)):
                self.park(msg_id, f"malformed: {problem}")
                continue
            items.append((msg_id, message))
        return items

    def __len__(self) -> int:
        return sum(1 for _ in self._matches())

    def done(self, msg_id: str) -> None:
        """Forget a delivered message."""
        try:
            (self.dir / f"{msg_id}.json").unlink()
        except FileNotFoundError:
            pass

    def park(self, msg_id: str, reason: str | None = None) -> None:
        """Move an undeliverable message to ``failed/`` so it stays inspectable; with ``reason`` (a message
        runbook could not read or use) that is logged and kept beside it as ``<id>.reason.txt``."""
        failed = self.dir / FAILED_DIR
        try:
            failed.mkdir(exist_ok=True)
            os.replace(self.dir / f"{msg_id}.json", failed / f"{msg_id}.json")
        except FileNotFoundError:
            return
        except OSError as exc:   # cannot move it (a folder named failed, a full disk): never deliver it twice
            log.error("outbox: could not move message %s to %s (%s)", msg_id, failed, exc)
            return
        if reason is not None:
            log.error("outbox: message %s %s; moved it to %s, the rest are delivered", msg_id, reason, failed)
            try:
                (failed / f"{msg_id}.reason.txt").write_text(reason + "\n", encoding="utf-8")
            except OSError:
                pass

    # -- key-value state -----------------------------------------------------

    def state_get(self, key: str, default: Any = None) -> Any:
        with self._lock:
            return self._state.get(key, default)

    def state_set(self, key: str, value: Any, max_keys: int | None = None) -> None:
        """Persist ``key`` -> ``value``; with ``max_keys`` the oldest keys are dropped."""
        with self._lock:
            self._state.pop(key, None)  # re-insert so insertion order = recency
            self._state[key] = value
            if max_keys is not None:
                for old in list(self._state)[: max(0, len(self._state) - max_keys)]:
                    del self._state[old]
            atomic_write_json(self.dir / STATE_FILE, self._state)

    def state_delete(self, key: str) -> None:
        with self._lock:
            if self._state.pop(key, None) is not None:
                atomic_write_json(self.dir / STATE_FILE, self._state)

    # -- internals -----------------------------------------------------------

    def _matches(self) -> list[re.Match[str]]:
        return [m for m in map(_NAME_RE.match, os.listdir(self.dir)) if m]

    def _remove_stale_temp_files(self) -> None:
        for name in os.listdir(self.dir):
            if name.startswith(TMP_PREFIX):
                try:
                    os.unlink(self.dir / name)
                except OSError:
                    pass

    def _load_state(self) -> dict[str, Any]:
        path = self.dir / STATE_FILE
        try:
            data = read_json_record(path)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.error("outbox: unreadable %s (%s); starting with empty state", path, exc)
            return {}
        return data if isinstance(data, dict) else {}


def pending_summary(directory: Path | str) -> dict[str, Any]:
    """How many messages wait in ``directory`` and since when; reads only (no Outbox: that would tidy up)."""
    folder = Path(directory)
    try:
        names = sorted(m.group(0) for m in map(_NAME_RE.match, os.listdir(folder)) if m)
    except OSError:   # no outbox yet (Slack never enabled), or not a folder
        names = []
    oldest = None
    for name in names[:1]:
        try:
            queued = read_json_record(folder / name).get("queued_at")
        except (OSError, ValueError, AttributeError):   # SourceError (deep, huge, not JSON) is a ValueError
            queued = None
        if isinstance(queued, (int, float)) and not isinstance(queued, bool) and 0 <= queued < 2e10:
            oldest = float(queued)
        else:   # an unreadable message: its file's age is the best answer left
            try:
                oldest = (folder / name).stat().st_mtime
            except OSError:
                pass
    try:
        parked = sum(1 for n in os.listdir(folder / FAILED_DIR) if _NAME_RE.match(n))
    except OSError:
        parked = 0
    return {"pending": len(names), "oldest_queued_at": oldest, "parked": parked}
