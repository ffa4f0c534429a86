"""Skip the suspicious batches (issue 48 items 1, 2, 6), on the toy trainer: a deterministic poison window (data
positions 12-13 make the update's lr 3.5: the loss climbs 6x, then 39x, as a block of junk would) diverges the run
at step 12 from scratch; loss-spike's rung 1 rolls back and cuts the lr, and the same data diverges it again at the
same step; rung 2 rolls back, skips the window and restores the lr; the run completes, the skipped tokens are the
window's, and its final weights are the undisturbed run's (the toy's update depends on the step and the lr, not
on the data: skipping keeps the step counter, so nothing else changes). Pure arithmetic: the same on every machine.

The window arithmetic itself (engine/core/data_windows.py) is tested here too, as the trainer side uses it
(runbook.sdk.data_position)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO, make_toy_project, stop_process

POISON = {"from": 12, "until": 13, "lr": 3.5}


def lr_of(project) -> float:
    from engine.core.yaml_source import round_trip_yaml

    return float(round_trip_yaml().load(project.config.read_text())["lr"])


def watch_exit_code(project) -> int:
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})   # the watcher imports tests.toy_trainer
    try:
        return watcher.wait(timeout=180)
    finally:
        stop_process(watcher)


@pytest.mark.slow
def test_a_poison_window_that_comes_back_after_the_lr_cut_is_skipped_and_the_run_completes(tmp_path):
    reference = make_toy_project(tmp_path / "reference", step_seconds=0.02)
    assert watch_exit_code(reference) == 0, reference.watch_output()
    project = make_toy_project(tmp_path / "project", step_seconds=0.02)
    project.set(trainer={"extra": {"step_seconds": 0.02, "poison": POISON}})
    assert watch_exit_code(project) == 0, project.watch_output()[-4000:]

    incidents = project.incidents()
    assert [(i["playbook"], i["outcome"]) for i in incidents] == [("loss-spike", "recovered")] * 2, incidents
    first, second = incidents
    # today's rung alone: the divergence came back at the same step after the lr cut
    assert first["step_at_failure"] is not None and second["step_at_failure"] is not None
    assert "skipping the data" not in json.dumps(first) and "skipping the data" in json.dumps(second)
    journal = [json.loads(line) for line in (project.run_dir / "journal.jsonl").read_text().splitlines()]
    [skipped] = [e for e in journal if e["kind"] == "data_skipped"]
    first_pos, last_pos = skipped["positions"]
    assert first_pos <= POISON["from"] and last_pos >= POISON["until"], skipped   # the window covers the poison
    assert skipped["tokens"] == skipped["batches"] * 16 * 64 == (last_pos - first_pos + 1) * 1024, skipped
    # the same window in the incident, the run log and the team's failure ledger
    keys = ("steps", "positions", "batches", "tokens")
    assert {k: second["data_skipped"][k] for k in keys} == {k: skipped[k] for k in keys}, second
    # and what the relaunched trainer said it left out (engine/core/data_windows.py's report line)
    told = {"positions": f"{first_pos}-{last_pos}", "of": "the toy's data positions"}
    assert second["data_skipped"]["trainer_reports"] == [told], second["data_skipped"]
    from typer.testing import CliRunner

    from runbook.cli import app

    shown = CliRunner().invoke(app, ["incidents", "show", second["id"], "--config", str(project.config)])
    assert shown.exit_code == 0 and "data skipped:" in shown.stdout, shown.output   # `runbook incidents show` says so
    assert f"the trainer left out: positions {first_pos}-{last_pos}" in " ".join(shown.stdout.split()), shown.stdout
    run_log = project.run_log.read_text()
    assert "skipping the data of steps" in run_log
    assert (f"**Data skipped:** steps {skipped['steps'][0]}-{skipped['steps'][1]} (data positions {first_pos}-{last_pos}"
            in run_log and f"the trainer left out: positions {first_pos}-{last_pos}" in run_log), run_log[-2000:]
    from engine.records.failure_ledger import build_ledger
    from engine.records.failure_ledger_read import ledger_entries

    [spike] = [row for row in build_ledger(ledger_entries(project.run_dir, "run")[0])["by_class"] if row.key == "loss-spike"]
    assert spike.tokens_skipped == skipped["tokens"], spike
    assert [text.split(": ", 1)[0] for text in spike.data_skipped] == [f"run:{second['id']}"], spike.data_skipped
    assert f"positions {first_pos}-{last_pos}" in spike.data_skipped[0], spike.data_skipped
    # the lr back where it was, and the final weights the undisturbed run's
    assert lr_of(project) == lr_of(reference), (lr_of(project), lr_of(reference))
    assert project.final_state() == reference.final_state()
    assert "toy: skipping data positions" in "".join(p.read_text() for p in (project.run_dir / "logs").glob("trainer-*.log"))
