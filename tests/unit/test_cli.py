"""The command table and the small commands."""

from __future__ import annotations

import pytest

import json
import os
import shutil
import subprocess
from pathlib import Path

from typer.main import get_command

from runbook.cli import app
from tests.conftest import RUNBOOK


# Transitional: these tests still run the real litgpt trainer (tests/conftest.py's `project` is the toy's).
@pytest.fixture
def project(litgpt_project):
    return litgpt_project


@pytest.fixture
def reference_run(litgpt_reference_run):
    return litgpt_reference_run


EXPECTED_COMMANDS = {"watch", "check", "init", "replay", "scan-data", "verify", "playbooks", "incidents", "drill", "status", "report",
                     "notify", "ledger", "slurm", "triage"}


def test_the_command_table_is_what_the_docs_promise():
    assert set(get_command(app).commands) == EXPECTED_COMMANDS
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert all(f"runbook {name}" in readme for name in EXPECTED_COMMANDS)


def test_verify_reports_each_checkpoint_and_fails_on_a_truncated_one(reference_run, tmp_path):
    source = reference_run["project"].out_dir
    good = subprocess.run([RUNBOOK, "verify", str(source)], capture_output=True, text=True, timeout=60)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "step-00000040 (last)" in good.stdout and "0 corrupt" in good.stdout

    copy = tmp_path / "out"
    copy.mkdir()
    shutil.copytree(source / "step-00000010", copy / "step-00000010")
    shutil.copytree(source / "step-00000020", copy / "step-00000020")
    pth = copy / "step-00000020" / "lit_model.pth"
    pth.write_bytes(pth.read_bytes()[: pth.stat().st_size // 3])
    bad = subprocess.run([RUNBOOK, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 8
    assert "CORRUPT" in bad.stdout and "1 corrupt" in bad.stdout


def test_drill_preemption_recovers_on_a_scratch_copy_and_leaves_the_run_alone(project):
    before = project.config.read_text()
    result = subprocess.run([RUNBOOK, "drill", "preemption", "--config", str(project.config)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "recovered: True" in result.stdout
    assert "preemption recovered" in result.stdout
    # The SIGTERM is a notice: the trainer finishes its step and saves it before it exits, so nothing is
    # lost, and the incident opens when it has exited (the step and the save are inside "detection").
    assert result.stdout.split("steps_lost: ")[1].split()[0] == "0", result.stdout
    detection = float(result.stdout.split("detection_s: ")[1].split()[0])
    assert 0 <= detection < 15.0
    assert project.config.read_text() == before          # the original config is untouched
    assert not project.out_dir.exists()                  # and nothing was trained in the real run
    reports = list((project.run_dir.parent / "drills").glob("preemption-*/drill-report.json"))
    assert len(reports) == 1
    # The run's tokenized data is linked into the scratch run, not tokenized again.
    scratch_caches = list((reports[0].parent / "runs" / "pretrain" / "data").iterdir())
    assert [c.name for c in scratch_caches] == [c.name for c in (project.run_dir / "data").iterdir()]
    assert all((c / "train" / "train" / "index.json").stat().st_ino ==
               (project.run_dir / "data" / c.name / "train" / "train" / "index.json").stat().st_ino for c in scratch_caches)


# --- one grammar: every command that reads a run takes CONFIG as a positional, -c or --config ------
NOT_A_RUN = {"playbooks", "init", "ledger"}   # playbooks: files of playbooks (-c names a run config there too); init
# writes one; ledger: run folders (-c names a run config there too)
FORMS = {   # the arguments before the config, when a command needs some; any other command: `runbook NAME CONFIG`
    "incidents show": ["incidents", "show", "incident-1"],
    "replay --all": ["replay", "--all"],
    "replay": ["replay", "incident-1"],
    "drill": ["drill", "preemption"],
    "slurm": ["slurm", "submit"],
    "triage": ["triage", __file__],   # LOG first (any readable file), then the config
}


def _invoke(args: list[str]):
    """In process, with runbook.cli.main's own handling of a SourceError (exit 3, the message)."""
    from typer.testing import CliRunner

    from engine.core.yaml_source import SourceError

    result = CliRunner().invoke(app, args)
    if isinstance(result.exception, SourceError):
        return 3, "\n".join(result.exception.messages)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.output


def _run_commands() -> dict[str, list[str]]:
    top = {name: [name] for name in get_command(app).commands if name not in NOT_A_RUN}
    return {**top, **FORMS}


def test_every_command_that_reads_a_run_takes_the_config_as_positional_c_or_config(tmp_path):
    # A config that does not exist, while the current folder has configs/run_config.yaml (the default):
    # exit 3 naming it proves the command read the config it was given, each way.
    missing = str(tmp_path / "elsewhere" / "configs" / "run_config.yaml")
    for name, before in _run_commands().items():
        for args in ([*before, missing], [*before, "-c", missing], [*before, "--config", missing]):
            code, output = _invoke(args)
            assert code == 3 and missing in output.replace("\n", ""), (args, code, output)


def test_a_group_takes_its_config_before_the_subcommand_too(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    code, output = _invoke(["incidents", "-c", missing, "show", "incident-1"])
    assert code == 3 and missing in output.replace("\n", ""), output


def test_two_different_configs_are_a_usage_error(tmp_path):
    code, output = _invoke(["status", str(tmp_path / "a.yaml"), "-c", str(tmp_path / "b.yaml")])
    assert code == 2 and "two run configs given" in output


@pytest.mark.slow
def test_the_same_run_read_each_way_says_the_same(tmp_path):
    from tests.runs.test_toy_trainer import make_toy_project, run_toy

    project = make_toy_project(tmp_path / "project", step_seconds=0.0)
    run_toy(project)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    answers = []
    for args in ([str(project.config)], ["-c", str(project.config)], []):   # [] : the default, from the project
        done = subprocess.run([RUNBOOK, "status", "--json", *args], capture_output=True, text=True, timeout=60,
                              cwd=project.root, env=env)
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        answer["progress"].pop("seconds_since_log_written")
        answers.append({k: v for k, v in answer.items() if k not in ("disk", "heartbeat", "last_transition")})   # clocks
    assert answers[0] == answers[1] == answers[2] and answers[0]["state"] == "completed"


def test_shell_completion_is_offered():
    assert "--install-completion" in subprocess.run([RUNBOOK, "--help"], capture_output=True, text=True, timeout=30).stdout
