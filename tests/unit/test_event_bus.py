"""The watch loop's one exit (engine/core/events.py): typed events, every subscriber hears each in order,
one subscriber's fault reaches no other; --json's schema names only kinds the bus carries."""

from __future__ import annotations

import dataclasses
import io
import json
import logging

import pytest

from engine.core.events import KINDS, EventBus, IncidentClosed, IncidentView, WatchWarning
from runbook.console import PlainReporter
from runbook.watch_events import SCHEMA, problems


def test_every_subscriber_hears_every_event_in_order_and_a_broken_one_harms_none(caplog):
    heard: list[tuple[str, object]] = []

    def broken(event) -> None:
        raise RuntimeError("a panel's bug")

    bus = EventBus(lambda e: heard.append(("first", e)), broken)
    bus.subscribe(lambda e: heard.append(("last", e)))
    warning = WatchWarning("disk nearly full")
    with caplog.at_level(logging.ERROR):
        bus.publish(warning)
    assert heard == [("first", warning), ("last", warning)]
    assert "a listener failed on a warning event" in caplog.text


def test_events_are_frozen_copies():
    view = IncidentView(id="incident-1", playbook="nan_loss", outcome="recovered")
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.outcome = "escalated"   # type: ignore[misc]


def test_the_json_schema_knows_only_the_bus_kinds_and_a_closed_incident_fits_it():
    assert set(SCHEMA) <= set(KINDS)
    stream = io.StringIO()
    PlainReporter(stream, as_json=True)(IncidentClosed(IncidentView(
        id="incident-3", playbook="nan_loss", outcome="recovered", recovery_seconds=4.25, steps_lost=20, resumed_step=40)))
    line = json.loads(stream.getvalue())
    assert problems(line) == [] and line["steps_lost"] == 20 and line["event"] == "incident_closed"
    assert line["text"] == "incident-3 recovered in 4.2 s (steps lost: 20)"


def test_the_run_log_hears_a_close_first_and_writes_the_record_it_carries(tmp_path):
    """The run log is a subscriber (issue 46): the close carries the whole record, the entry is on disk
    before the next listener (the notifier, the console) hears the close, and an event without a record
    or of another kind writes nothing."""
    from engine.core.write_trouble import WriteTrouble
    from engine.records.held_writes import HeldRunLog
    from engine.records.incident import Incident
    from engine.trainers.run_config import load_config
    from tests.runs.test_toy_trainer import make_toy_project

    loaded = load_config(make_toy_project(tmp_path / "project").config)
    bus = EventBus()
    run_log = HeldRunLog(lambda: loaded, WriteTrouble(bus.publish), bus.publish)
    seen_on_disk: list[bool] = []
    bus.subscribe(run_log.hear)
    bus.subscribe(lambda e: seen_on_disk.append(loaded.run_log.exists() and "incident-7" in loaded.run_log.read_text()))
    record = Incident(id="incident-7", playbook="oom", outcome="recovered", steps_lost=2)
    bus.publish(WatchWarning("not an incident"))
    bus.publish(IncidentClosed(record.view()))   # no record carried: nothing to write
    assert not loaded.run_log.exists()
    bus.publish(IncidentClosed(record.view(), record_json=json.dumps(record.to_json())))
    assert seen_on_disk == [False, False, True]
    text = loaded.run_log.read_text()
    assert text.count("incident-7") >= 1 and "oom" in text
    bus.publish(IncidentClosed(record.view(), record_json=json.dumps(record.to_json())))   # reported again (a restart)
    assert loaded.run_log.read_text() == text   # the entry's marker keeps it to one
