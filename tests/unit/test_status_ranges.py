"""Values out of range in a run folder are shown as invalid, never as a plausible value (issue 34): a
heartbeat time of 1e300 read "0 s ago", a negative step was shown as a step (status, live view, report).
The run folder is the one tests/unit/test_report_status.py lays out as a real run leaves it."""

from __future__ import annotations

import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from engine.core.events import IncidentClosed, Observed, Transition
from engine.records.incident import Incident
from engine.core.state import RunPhase
from engine.trainers.run_config import load_config
from runbook.cli import app
from runbook.live_view import LiveView
from tests.unit.test_report_status import T0, finished_run, incident, snapshot  # noqa: F401 - finished_run is a fixture

runner = CliRunner()


def _run_dir(config):
    return config.parent.parent / "runs" / "pretrain"


def _heartbeat(config, **beat) -> None:
    (_run_dir(config) / "heartbeat.json").write_text(json.dumps(
        {"time": T0 + 200, "step": 100, "trainer_alive": False, "watcher_pid": 4321, **beat}))


@pytest.mark.parametrize("time", [1e300, -5.0, 12.0, "soon"], ids=["far future", "negative", "1970", "a string"])
def test_a_heartbeat_time_out_of_range_is_shown_invalid_and_counts_as_no_heartbeat(finished_run, time):
    without = runner.invoke(app, ["status", str(finished_run)])
    _heartbeat(finished_run, time=time)
    result = runner.invoke(app, ["status", str(finished_run)])
    assert "heartbeat heartbeat time invalid (" in result.output and " ago: step" not in result.output, result.output
    assert result.exit_code == without.exit_code   # an invalid heartbeat is no heartbeat
    data = json.loads(runner.invoke(app, ["status", str(finished_run), "--json"]).output)
    assert data["heartbeat"] is None and data["heartbeat_invalid"].startswith("heartbeat time invalid")


def test_a_valid_heartbeat_still_reads_its_age(finished_run):
    _heartbeat(finished_run)
    result = runner.invoke(app, ["status", str(finished_run)])
    assert " ago: step 100, trainer alive False" in result.output and "invalid" not in result.output


def test_a_negative_heartbeat_step_is_shown_invalid(finished_run):
    _heartbeat(finished_run, step=-5)
    result = runner.invoke(app, ["status", str(finished_run)])
    assert "step invalid (-5 is negative)" in result.output and "step -5" not in result.output, result.output


def test_a_transition_time_in_the_far_future_is_not_shown_as_a_moment_ago(finished_run):
    journal = _run_dir(finished_run) / "journal.jsonl"
    lines = journal.read_text().splitlines()
    last = json.loads(lines[-1])
    lines[-1] = json.dumps({**last, "time": 1.9e10})   # the journal takes times up to 2e10 (year 2603)
    journal.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["status", str(finished_run)])
    assert "last change at an invalid time (1.9e+10 is" in result.output and "last change 0 s ago" not in result.output, result.output


def _negative_incident(config) -> None:
    record = incident(2, "loss-spike", 70, 60, T0 + 129)
    record.update(step_at_failure=-5, steps_lost=-65)
    (_run_dir(config) / "incidents" / "incident-2.json").write_text(json.dumps(record, indent=2))


def test_a_negative_incident_step_is_invalid_in_status(finished_run):
    _negative_incident(finished_run)
    result = runner.invoke(app, ["status", str(finished_run)])
    assert "at step invalid (-5 is negative), steps lost invalid (-65 is negative)" in result.output, result.output
    assert "step -5" not in result.output


def test_a_negative_incident_step_is_invalid_in_the_report_and_not_summed(finished_run, tmp_path):
    _negative_incident(finished_run)
    result = runner.invoke(app, ["report", str(finished_run), "--output", str(tmp_path / "r.md")])
    assert result.exit_code == 0, result.output
    markdown = (tmp_path / "r.md").read_text()
    assert "| incident-2 | loss-spike | recovered | invalid (-5 is negative) | 60 | invalid (-65 is negative) |" in markdown
    assert "| -5 |" not in markdown and "-65" not in markdown.replace("(-65 is negative)", "")
    assert "incident-2: step_at_failure invalid (-5 is negative)" in result.output


def test_the_live_view_never_draws_a_negative_step(finished_run):
    console = Console(record=True, width=200, force_terminal=False)
    view = LiveView(load_config(finished_run), console=console)
    view(Transition(RunPhase.STARTING, RunPhase.RUNNING, "launch 1"))
    view(Observed(snapshot(-5, T0, 4.8)))
    record = incident(7, "preemption", -3, 0, T0 + 30)
    record.update(outcome="recovered", steps_lost=-3)
    view(IncidentClosed(Incident.model_validate(record).view()))
    console.print(view.render())
    text = console.export_text()
    assert "invalid (-5 is negative)" in text and "-5 / 100" not in text, text
    assert "at step invalid (-3 is negative)" in text and "steps lost invalid (-3 is negative)" in text


def test_a_negative_incident_step_is_invalid_in_incidents_and_incidents_show(finished_run):
    _negative_incident(finished_run)
    table = runner.invoke(app, ["incidents", str(finished_run)], terminal_width=200)
    assert table.exit_code == 0, table.output
    [line] = [ln for ln in table.output.splitlines() if "incident-2" in ln]
    assert "-5" not in line.replace("(-5 is", "") and "-65" not in line.replace("(-65", ""), line
    assert "invalid" in line, line
    shown = runner.invoke(app, ["incidents", "show", "incident-2", str(finished_run)], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "step at failure:   invalid (-5 is negative)" in shown.output, shown.output
    assert "steps lost:        invalid (-65 is negative)" in shown.output, shown.output
