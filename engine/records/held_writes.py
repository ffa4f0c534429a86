"""What a full run folder or run-log disk holds back, kept in memory and written when space returns.

The supervisor hands IncidentRunner a HoldingStore (incident records), subscribes a HeldRunLog (run-log
entries) to the loop's event bus ahead of every other listener (an incident's entry is written before its
close is announced), and calls Backlog.catch_up() every tick: records first (a record is saved before the
journal says what it holds), then the journal's held entries (engine/records/journal.py), then the run log.
Each kind says once that it is failing and once that it is written again (engine/core/write_trouble.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from engine.core.crash_points import crash_point
from engine.core.events import IncidentClosed, Publish, WatchEvent, WatchWarning
from engine.records.incident import Incident
from engine.records.incident_store import IncidentStore
from engine.core.write_trouble import WriteTrouble, passing
from engine.records.run_log import append_entry

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig
    from engine.records.journal import Journal


class HoldingStore(IncidentStore):
    """An IncidentStore whose write never raises OSError: a record the disk refuses is kept (the
    latest state of that incident) and written, oldest first, at the next write or catch-up."""

    def __init__(self, run_dir: Path, counter_file: Path | None, trouble: WriteTrouble):
        super().__init__(run_dir, counter_file)
        self.trouble = trouble
        self._held: dict[str, Incident] = {}

    def write(self, incident: Incident) -> Path:
        self._held[incident.id] = incident   # the object itself: a later write sends its newest state
        self.flush()
        return self.path(incident.id)

    def flush(self) -> int:
        for incident_id, incident in list(self._held.items()):
            try:
                super().write(incident)   # atomic: a failure leaves the previous record, never half of one
            except OSError as error:
                self.trouble.failed("incident records", error, f"keeping {len(self._held)} record(s) in memory "
                                    "(the older version stays on disk) to write when space returns")
                return len(self._held)
            del self._held[incident_id]
        self.trouble.worked("incident records")
        return 0

    @property
    def held(self) -> int:
        return len(self._held)


class HeldRunLog:
    """The run-log appender: an entry the disk refuses is kept and appended, in order, later
    (engine/records/run_log.py appends an entry whole or not at all, and at most once per incident)."""

    def __init__(self, loaded: Callable[[], LoadedConfig], trouble: WriteTrouble, events: Publish):
        self.loaded = loaded            # a recovery may rewrite the run config (run_log, its template)
        self.trouble = trouble
        self.events = events
        self._held: list[dict] = []

    def hear(self, event: WatchEvent) -> None:
        """The bus's first listener: an incident's close carries its record, whose entry is appended (or held)
        before the notifier and the console hear of it. A watcher killed after this reports the incident
        again; the entry's marker keeps it to one (engine/records/run_log.py)."""
        if isinstance(event, IncidentClosed) and event.record_json:
            self.append(json.loads(event.record_json))
            crash_point("run-log-appended")

    def append(self, record: dict) -> None:
        self._held.append(record)
        self.flush()

    def flush(self) -> int:
        loaded = self.loaded()
        template = loaded.config.run_log_template
        while self._held:
            record = self._held[0]
            try:
                append_entry(loaded.run_log, record, loaded.resolve(template) if template else None)
            except OSError as error:
                if not passing(error):
                    self.events(WatchWarning(f"could not append {record.get('id')} to {loaded.run_log}: {error}"))
                    self._held.pop(0)
                    continue
                ids = ", ".join(str(r.get("id")) for r in self._held)
                self.trouble.failed(f"the run log {loaded.run_log}", error,
                                    f"keeping the entry of {ids} in memory to append when space returns")
                return len(self._held)
            except Exception as error:  # noqa: BLE001 - a template error: the record on disk is complete; say so
                self.events(WatchWarning(f"could not append {record.get('id')} to {loaded.run_log}: {error}"))
            self._held.pop(0)
            self.trouble.worked(f"the run log {loaded.run_log}", f"appended {record.get('id')}")
        return 0

    @property
    def held(self) -> int:
        return len(self._held)


class Backlog:
    """Everything held in memory, caught up in the order the crash-safety rules want."""

    def __init__(self, store: HoldingStore, journal: Journal, run_log: HeldRunLog):
        self.store, self.journal, self.run_log = store, journal, run_log

    def catch_up(self) -> dict[str, int]:
        self.store.flush()
        self.journal.flush()
        self.run_log.flush()
        return self.held()

    def held(self) -> dict[str, int]:
        """What is only in memory now, by kind (empty when everything is on disk)."""
        counts = {"incident records": self.store.held, "journal entries": self.journal.held,
                  "run-log entries": self.run_log.held}
        return {kind: n for kind, n in counts.items() if n}
