"""Incident records: numbered per project, never reused, each written atomically as one JSON file."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from engine.incident_records import ID_PATTERN
from engine.durable import atomic_write_text


class IncidentsUnreadable(OSError):
    """The incidents folder exists but cannot be listed (not a folder, no permission)."""


class IncidentStore:
    """`<run_dir>/incidents/incident-N.json`; N comes from a project-wide counter so ids never repeat,
    even across run folders or after one is deleted."""

    def __init__(self, run_dir: Path, counter_file: Path):
        self.dir = run_dir / "incidents"
        self.counter_file = counter_file

    def next_id(self) -> str:
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

    def write(self, record: dict) -> Path:
        path = self.path(record["id"])
        atomic_write_text(path, json.dumps(record, indent=2, sort_keys=False, default=str) + "\n")
        return path

    def load(self, incident_id: str) -> dict:
        path = self.path(incident_id)
        if not path.exists():
            known = ", ".join(self.ids()) or "none"
            raise FileNotFoundError(f"no record {incident_id} in {self.dir} (known: {known})")
        return json.loads(path.read_text(encoding="utf-8"))

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

    def all(self) -> list[dict]:
        return [self.load(i) for i in self.ids()]
