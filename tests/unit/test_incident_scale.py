"""Read commands at 20,000 incident records (issue 45, item 2): `runbook status` read and validated every
record (278 s and 9.3 GB at 100,000); it now reads the newest record and those the index does not vouch for
(engine/records/incident_index.py). The records are written fast, directly in the store's format: one real
`IncidentStore.write`, then its bytes under other ids with the index line the store appends."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from engine.records.incident import Incident
from engine.records.incident_index import INDEX_NAME, append_line, index_line, stamp_of
from engine.records.incident_store import IncidentStore
from engine.trainers.run_config import load_config
from runbook.commands.status_cmd import gather
from tests.unit.test_report_status import T0, finished_run, incident  # noqa: F401 - finished_run is a fixture

MANY = 20_000


def outcome_of(n: int) -> str:
    return "escalated" if n % 4 == 0 else "recovered"


def fill(run_dir: Path) -> IncidentStore:
    """incident-1 .. incident-MANY, as the store writes them (record first, then its index line)."""
    store = IncidentStore(run_dir)
    store.write(Incident.model_validate(incident(1, "preemption", 45, 40, T0)))
    template = store.path("incident-1").read_text()
    lines = []
    for n in range(2, MANY + 1):
        path = store.path(f"incident-{n}")
        path.write_text(template.replace('"incident-1"', f'"incident-{n}"')
                        .replace('"outcome": "recovered"', f'"outcome": "{outcome_of(n)}"'))
        lines.append(index_line(f"incident-{n}", outcome_of(n), stamp_of(path)))
    append_line(store.dir, "".join(lines))
    return store


@pytest.fixture
def many(finished_run):   # noqa: F811 - the fixture imported above
    run_dir = finished_run.parent.parent / "runs" / "pretrain"
    for old in (run_dir / "incidents").iterdir():
        old.unlink()
    fill(run_dir)
    return finished_run, run_dir


def test_status_summary_reads_only_the_newest_record_and_those_the_index_does_not_vouch_for(many):
    _config, run_dir = many
    summary = IncidentStore(run_dir).summary()
    escalated = MANY // 4
    assert summary.count == MANY and summary.by_outcome == {"recovered": MANY - escalated, "escalated": escalated}
    assert summary.newest is not None and summary.newest.id == f"incident-{MANY}" and summary.problems == []

    store = IncidentStore(run_dir)
    assert store.summary().count == MANY and store.reads == 1

    # A record rewritten after its index line (a crash lost the line), one damaged, one older than the index.
    stale = json.loads(store.path("incident-5").read_text())
    store.path("incident-5").write_text(json.dumps({**stale, "outcome": "escalated", "lesson": "rewritten"}, indent=2))
    store.path("incident-7").write_text('{"id": "incident-7", "outcome": "recov')
    store.path(f"incident-{MANY + 1}").write_text(store.path("incident-2").read_text()
                                                  .replace('"incident-2"', f'"incident-{MANY + 1}"'))
    store = IncidentStore(run_dir)
    summary = store.summary()
    assert store.reads == 3   # the newest (incident-MANY+1), incident-5 and incident-7: nothing else
    assert summary.count == MANY and summary.by_outcome["escalated"] == escalated + 1
    assert summary.newest.id == f"incident-{MANY + 1}"
    assert len(summary.problems) == 1 and "incident-7.json" in summary.problems[0]


def test_status_parses_a_bounded_number_of_records_out_of_twenty_thousand(many, monkeypatch):
    config, run_dir = many
    parsed = []
    real_read = IncidentStore.read

    def counting_read(store, incident_id):   # the real read, counted: how many records status parses
        parsed.append(incident_id)
        return real_read(store, incident_id)

    monkeypatch.setattr(IncidentStore, "read", counting_read)
    started = time.monotonic()
    status = gather(load_config(config))
    took = time.monotonic() - started
    assert status["incidents"]["count"] == MANY and status["incidents"]["last"]["id"] == f"incident-{MANY}"
    assert status["incidents"]["by_outcome"]["escalated"] == MANY // 4
    assert parsed == [f"incident-{MANY}"], f"status parsed {len(parsed)} records"
    assert took < 10, f"status took {took:.1f} s at {MANY} records"
    assert (run_dir / "incidents" / INDEX_NAME).is_file()


def test_incidents_lists_a_page_of_the_newest_records_and_reads_only_those(many, monkeypatch):
    from typer.testing import CliRunner

    from runbook.cli import app

    config, _run_dir = many
    parsed = []
    real_read = IncidentStore.read

    def counting_read(store, incident_id):
        parsed.append(incident_id)
        return real_read(store, incident_id)

    monkeypatch.setattr(IncidentStore, "read", counting_read)
    result = CliRunner().invoke(app, ["incidents", "--json", str(config)])
    assert result.exit_code == 0, result.output
    assert len(parsed) == 50 and parsed[-1] == f"incident-{MANY}", f"read {len(parsed)} records"
    shown = json.loads(result.stdout)
    assert [r["id"] for r in shown] == [f"incident-{n}" for n in range(MANY - 49, MANY + 1)]   # oldest first
    assert f"the newest 50 of {MANY} records" in result.stderr
    parsed.clear()
    table = CliRunner().invoke(app, ["incidents", "--limit", "3", str(config)], terminal_width=200)
    assert table.exit_code == 0 and len(parsed) == 3 and f"incident-{MANY}" in table.stdout, table.output


def test_incidents_lists_all_twenty_thousand_records_in_linear_time(many):
    from typer.testing import CliRunner

    from runbook.cli import app

    config, _run_dir = many
    started = time.monotonic()
    result = CliRunner().invoke(app, ["incidents", "--json", "--limit", "0", str(config)])
    took = time.monotonic() - started
    assert result.exit_code == 0 and len(json.loads(result.stdout)) == MANY
    assert took < 60, f"listing {MANY} records took {took:.0f} s (the folder was listed once per record read)"
