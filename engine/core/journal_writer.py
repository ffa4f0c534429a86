"""The run's journal as the floors below engine/records write to it (engine/records/journal.Journal)."""

from __future__ import annotations

from typing import Protocol


class JournalWriter(Protocol):
    def append(self, kind: str, **data: object) -> object: ...
