"""Incident records: numbered per project, never reused, each written atomically as one JSON file,
and read back by one reader that checks every field (engine/records/incident_checks.py) and types it
(engine/records/incident.py)."""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from engine.core.bounded_read import MAX_FILE_BYTES, read_json_record, without_name
from engine.core.durable import atomic_write_text
from engine.core.errors import SourceError
from engine.core.text_safety import redact_tree
from engine.records.incident import Incident
from engine.records.incident_checks import ID_PATTERN, problem
from engine.records.incident_index import Stamp, append_line, index_line, read_index, stamp_of


class IncidentsUnreadable(OSError):
    """The incidents folder exists but cannot be listed (not a folder, no permission)."""


class BadIncidentRecord(ValueError):
    """One record cannot be used; the message is one sentence naming the file and why."""

    def __init__(self, path: Path, reason: str, missing: bool = False):
        super().__init__(f"{path} {reason}")
        self.path, self.reason, self.missing = path, reason, missing


@dataclass(frozen=True)
class Summary:
    count: int                       # usable records
    by_outcome: dict[str, int]
    newest: Incident | None          # the newest usable record
    problems: list[str]              # one sentence per record read and skipped


class IncidentStore:
    """`<run_dir>/incidents/incident-N.json`; N comes from a project-wide counter so ids never repeat,
    even across run folders or after one is deleted."""

    def __init__(self, run_dir: Path, counter_file: Path | None = None):   # readers never allocate ids
        self.dir = run_dir / "incidents"
        self.counter_file = counter_file
        self.reads = 0   # records read in full by this store (a summary must not read them all)

    def next_id(self) -> str:
        assert self.counter_file is not None, "a reader's store cannot allocate ids"
        self.counter_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.counter_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 32, 0).decode().strip()
            number = int(raw) + 1 if raw.isdigit() else 1
            existing = [int(m.group(1)) for p in self.dir.glob("incident-*.json") if (m := ID_PATTERN.match(p.stem))]
            number = max([number, *(n + 1 for n in existing)])
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{number}\n".encode(), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        return f"incident-{number}"

    def path(self, incident_id: str) -> Path:
        return self.dir / f"{incident_id}.json"

    def write(self, incident: Incident) -> Path:
        """The record on disk has every secret redacted (a token the trainer printed is in its log tail
        and snapshot); the Incident in memory is left as it is."""
        path = self.path(incident.id)
        record = redact_tree(incident.to_json())
        atomic_write_text(path, json.dumps(record, indent=2, sort_keys=False, default=str) + "\n")
        try:   # after the record: a crash in between leaves a line that no longer matches, read in full then
            append_line(self.dir, index_line(incident.id, incident.outcome, stamp_of(path)))
        except OSError:   # a full disk: the record is written; readers read it in full (incident_index.py)
            pass
        return path

    def read(self, incident_id: str) -> Incident:
        """The record, checked and typed; BadIncidentRecord (one sentence) when it cannot be used."""
        self.reads += 1
        path = self.path(incident_id)
        if not ID_PATTERN.match(incident_id):
            raise BadIncidentRecord(path, "is not named incident-N", missing=True)
        try:
            raw = read_json_record(path, MAX_FILE_BYTES, name=str(path))   # bounded: size, UTF-8, nesting
        except FileNotFoundError:
            raise BadIncidentRecord(path, "does not exist", missing=True) from None
        except SourceError as error:   # a folder, a FIFO, 100,000-deep JSON, not JSON at all: one sentence
            raise BadIncidentRecord(path, f"is not a readable incident record ({without_name(error, str(path))})") from None
        except (OSError, ValueError, RecursionError) as error:
            raise BadIncidentRecord(path, f"is not a readable incident record (perhaps half-written: "
                                          f"{type(error).__name__}: {str(error)[:120]})") from None
        if not isinstance(raw, dict) or raw.get("id") != incident_id:
            raise BadIncidentRecord(path, f"is not an incident record (expected a JSON object with \"id\": \"{incident_id}\")")
        reason = problem(raw)
        if reason is None:
            try:
                return Incident.model_validate(raw)
            except ValidationError as error:
                first = error.errors()[0]
                reason = f"'{'.'.join(str(x) for x in first['loc'])}': {first['msg']}"
        raise BadIncidentRecord(path, f"is not a valid incident record: {reason}")

    def read_all(self) -> tuple[list[Incident], list[str]]:
        """Every usable record, oldest first, and one sentence per record skipped (file and reason).
        IncidentsUnreadable when the folder itself cannot be listed."""
        incidents, problems = [], []
        for incident_id in self.ids():
            try:
                incidents.append(self.read(incident_id))
            except BadIncidentRecord as bad:
                problems.append(f"{bad}; skipped it")
        return incidents, problems

    def summary(self) -> Summary:
        """The count by outcome and the newest usable record, reading in full only the newest and the records
        the index does not vouch for (incident_index.py). IncidentsUnreadable when the folder cannot be listed."""
        stamps = self._stamps()
        index = read_index(self.dir)
        by_outcome: dict[str, int] = {}
        problems: list[str] = []
        newest: Incident | None = None
        for number, incident_id in sorted(((n, i) for i, (n, _s) in stamps.items()), reverse=True):
            known = index.get(incident_id)
            outcome = known[0] if known is not None and known[1] == stamps[incident_id][1] else None
            if outcome is None or newest is None:
                try:
                    record = self.read(incident_id)
                except BadIncidentRecord as bad:
                    problems.append(f"{bad}; skipped it")
                    continue
                outcome, newest = record.outcome, newest or record
            by_outcome[outcome] = by_outcome.get(outcome, 0) + 1
        return Summary(sum(by_outcome.values()), by_outcome, newest, problems[::-1])

    def _stamps(self) -> dict[str, tuple[int, Stamp]]:
        """{id: (N, stamp)} of every incident-N.json, from one scan of the folder."""
        try:
            entries = list(os.scandir(self.dir))
        except FileNotFoundError:
            return {}
        except OSError as error:
            raise IncidentsUnreadable(f"cannot list the incident records in {self.dir}: "
                                      f"{error.strerror or error}") from None
        found = {}
        for entry in entries:
            if entry.name.endswith(".json") and (m := ID_PATTERN.match(entry.name[:-5])):
                try:
                    info = entry.stat(follow_symlinks=True)
                except OSError:
                    info = None
                found[entry.name[:-5]] = (int(m.group(1)), Stamp(info.st_size, info.st_mtime_ns) if info else Stamp(-1, -1))
        return found

    def ids(self) -> list[str]:
        try:
            names = os.listdir(self.dir)   # glob() would answer "none" for a folder it cannot read
        except FileNotFoundError:
            return []
        except OSError as error:
            raise IncidentsUnreadable(f"cannot list the incident records in {self.dir}: "
                                      f"{error.strerror or error}") from None
        found = [(int(m.group(1)), name[:-5]) for name in names
                 if name.endswith(".json") and (m := ID_PATTERN.match(name[:-5]))]
        return [name for _, name in sorted(found)]
