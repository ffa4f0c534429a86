"""Bad incident records and other bad inputs the record readers meet: a sentence and an exit code, never a traceback.

The run folder is test_report_status's finished run (real checkpoints, litgpt-format logs, the
supervisor's record fields, an old-format journal). One of its two records is replaced by a bad one:
`incidents`, `status` and `report` name that file and still show the other record.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import RUNBOOK
from tests.unit.test_report_status import finished_run  # noqa: F401  (the fixture)

BAD_FIELDS = {
    "opened-at-1e308": {"opened_at": 1e308},
    "opened-at-nan": {"opened_at": float("nan")},
    "notes-5": {"notes": 5},
    "recovery-slow": {"recovery_seconds": "slow"},
    "config-changes-list": {"config_changes": [1, 2]},
    "step-400-digits": {"step_at_failure": 10**400},
    "recovery-inf": {"recovery_seconds": float("inf")},
}


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([RUNBOOK, *args], capture_output=True, text=True, timeout=120)


def run_dir(config: Path) -> Path:
    return config.parent.parent / "runs" / "pretrain"


def spoil(config: Path, fields: dict) -> Path:
    path = run_dir(config) / "incidents" / "incident-2.json"
    record = json.loads(path.read_text())
    record.update(fields)
    path.write_text(json.dumps(record, indent=2))   # json writes NaN/Infinity, as a careless editor might
    return path


@pytest.mark.parametrize("name", sorted(BAD_FIELDS))
def test_a_bad_record_is_skipped_with_its_file_and_the_other_is_shown(finished_run, name):
    bad = spoil(finished_run, BAD_FIELDS[name])

    listing = run("incidents", "--config", str(finished_run))
    assert listing.returncode == 9, listing.stderr          # docs: an unreadable record exits 9
    assert str(bad) in listing.stderr and "incident-1" in listing.stdout and "Traceback" not in listing.stderr

    show = run("incidents", "show", "incident-2", "--config", str(finished_run))
    assert show.returncode == 9 and str(bad) in show.stderr and "Traceback" not in show.stderr

    status = run("status", str(finished_run), "--json")
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout, parse_constant=lambda c: pytest.fail(f"{c} in status --json"))
    assert data["incidents"]["count"] == 1 and str(bad) in status.stderr


def test_report_skips_a_bad_record_and_names_it(finished_run):
    bad = spoil(finished_run, BAD_FIELDS["step-400-digits"])
    result = run("report", str(finished_run))
    assert result.returncode == 0, result.stderr
    assert str(bad) in result.stderr and "Traceback" not in result.stderr
    text = (run_dir(finished_run) / "report" / "report.md").read_text()
    assert "| incident-1 |" in text and "| incident-2 |" not in text


def test_replay_names_the_bad_record_and_replays_the_others(tmp_path):
    from tests.language.test_incidents_replay import PLAYBOOKS, REPO, T0, snapshot, write_record

    root = tmp_path / "project"
    (root / "configs").mkdir(parents=True)
    config = (REPO / "configs" / "run_config.yaml").read_text()   # only the test's own playbooks:
    (root / "configs" / "run_config.yaml").write_text(config.replace("  shipped: true", "  shipped: false"))
    (root / "playbooks").mkdir()
    for name, text in PLAYBOOKS.items():
        (root / "playbooks" / name).write_text(text)
    write_record(root, snapshot(), T0)
    write_record(root, snapshot(time=T0 + 600), T0 + 600)
    config = root / "configs" / "run_config.yaml"
    bad = spoil(config, {"notes": 5})
    result = run("replay", "--all", "--config", str(config))
    assert result.returncode == 9 and str(bad) in result.stderr and "Traceback" not in result.stderr
    assert "1 incident(s) replayed: 1 unchanged, 0 changed, 1 unreadable" in result.stdout


def test_an_absurd_incident_id_is_one_sentence(finished_run):
    for command in (("incidents", "show"), ("replay",)):
        result = run(*command, "incident-" + "9" * 300, "--config", str(finished_run))
        assert result.returncode == 9 and "not an incident id" in result.stderr and "Traceback" not in result.stderr


def test_an_unlistable_incidents_folder_is_not_no_incidents(finished_run):
    folder = run_dir(finished_run) / "incidents"
    shutil.rmtree(folder)
    folder.write_text("not a folder")   # as root, chmod 000 would not stop us reading
    listing = run("incidents", "--config", str(finished_run))
    assert listing.returncode == 9 and "no incidents recorded" not in listing.stdout
    assert str(folder) in listing.stderr and "Traceback" not in listing.stderr
    status = run("status", str(finished_run))
    assert status.returncode == 0 and str(folder) in status.stderr


def test_a_last_link_pointing_at_itself(finished_run):
    out_dir = finished_run.parent.parent / "checkpoints" / "pretrain"
    (out_dir / "last").unlink()
    os.symlink("last", out_dir / "last")
    for args in (("status", str(finished_run)), ("verify", str(out_dir)),
                 ("report", str(finished_run))):
        result = run(*args)
        assert result.returncode == 0, (args, result.stderr)
        assert "Traceback" not in result.stderr


def test_a_400_digit_step_in_a_log_line(finished_run):
    log = run_dir(finished_run) / "logs" / "trainer-003.log"
    with open(log, "a") as fh:
        fh.write(f"Epoch 1 | iter 4 step {'9' * 400} | loss train: 1.000, val: n/a | iter time: 1.2.3 ms (step) "
                 "remaining time: 0:00:01\n")
    result = run("status", str(finished_run))
    assert result.returncode == 0 and "step      100 of 100" in result.stdout, result.stderr


def test_status_json_has_no_nan(finished_run):
    log = run_dir(finished_run) / "logs" / "trainer-003.log"
    with open(log, "a") as fh:
        fh.write("Epoch 1 | iter 404 step 101 | loss train: nan, val: n/a | iter time: 200.00 ms (step) "
                 "remaining time: 0:00:00\n")
    (run_dir(finished_run) / "heartbeat.json").write_text('{"time": 1e999, "step": NaN}')
    result = run("status", str(finished_run), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} in status --json"))
    assert data["progress"]["loss"] is None


def test_report_to_an_unwritable_place_is_one_sentence(finished_run, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run("report", str(finished_run), "--output", str(blocker / "sub" / "report.md"))
    assert result.returncode == 2 and "cannot write the report" in result.stderr and "Traceback" not in result.stderr
