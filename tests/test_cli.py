"""The command table and the small commands."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from typer.main import get_command

from runbook.cli import app
from tests.conftest import RUNBOOK

EXPECTED_COMMANDS = {"watch", "replay", "scan-data", "verify", "playbooks", "incidents", "drill", "status", "report",
                     "notify"}


def test_the_command_table_is_what_the_docs_promise():
    assert set(get_command(app).commands) == EXPECTED_COMMANDS
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
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
    detection = float(result.stdout.split("detection_s: ")[1].split()[0])
    assert 0 <= detection < 2.0
    assert project.config.read_text() == before          # the original config is untouched
    assert not project.out_dir.exists()                  # and nothing was trained in the real run
    reports = list((project.run_dir.parent / "drills").glob("preemption-*/drill-report.json"))
    assert len(reports) == 1
