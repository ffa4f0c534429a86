"""One project per run folder (issue 45, item 4): project Y whose run_dir is a symlink to project X's was not
refused; with X's watcher gone it read X's journal (here: called X's run completed, with X's final/), and with
X's trainer orphaned it adopted it and escalated into X's journal. Real `runbook watch` processes on the toy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from functools import partial

import pytest

from engine.core.run_dir_owner import OWNER_NAME
from runbook.exit_codes import ExitCode
from tests.conftest import REPO, RUNBOOK, run_watch
from tests.runs.test_toy_trainer import make_toy_project


def watch(project, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([RUNBOOK, "watch", str(project.config), *args], capture_output=True, text=True,
                          cwd=project.root, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)


def test_a_watch_whose_run_dir_is_another_projects_is_refused_naming_both_configs(tmp_path):
    x = make_toy_project(tmp_path / "x", step_seconds=0.0)
    run_watch(x)
    journal = (x.run_dir / "journal.jsonl").read_bytes()

    y = make_toy_project(tmp_path / "y", step_seconds=0.0)
    (y.root / "runs").mkdir(exist_ok=True)
    os.symlink(x.run_dir, y.root / "runs" / "shared")
    y.set(run_dir="runs/shared")
    for args in ((), ("--dry-run",)):
        result = watch(y, *args)
        assert result.returncode == ExitCode.RUN_DIR_TAKEN, (result.returncode, result.stdout, result.stderr)
        assert "belongs to another project" in result.stderr
        assert str(x.config.resolve()) in result.stderr and str(y.config.resolve()) in result.stderr
    check = subprocess.run([RUNBOOK, "check", str(y.config)], capture_output=True, text=True, cwd=y.root,
                           env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert check.returncode == ExitCode.BAD_CONFIG and "run_dir" in check.stderr, (check.stdout, check.stderr)
    assert "belongs to another project" in check.stderr and "ready to launch" not in check.stdout
    assert (x.run_dir / "journal.jsonl").read_bytes() == journal   # nothing written into X's run folder
    owner = json.loads((x.run_dir / OWNER_NAME).read_text())
    assert owner["config"] == str(x.config.resolve()) and owner["out_dir"] == str(x.out_dir.resolve())
    assert watch(x).returncode == ExitCode.OK                      # X itself: still its own (completed) run


@pytest.mark.parametrize("how", ["moved", "copied"])
def test_a_project_moved_or_copied_to_another_path_keeps_its_run_dir(tmp_path, how):
    x = make_toy_project(tmp_path / "node-a" / "x", step_seconds=0.0)
    run_watch(x)
    moved = tmp_path / "node-b" / "x"
    moved.parent.mkdir()
    (os.rename if how == "moved" else partial(shutil.copytree, symlinks=True))(x.root, moved)
    result = subprocess.run([RUNBOOK, "watch", str(moved / "configs" / "run_config.yaml")], capture_output=True,
                            text=True, cwd=moved, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert result.returncode == ExitCode.OK, result.stderr
    assert json.loads((moved / "runs" / "pretrain" / OWNER_NAME).read_text())["config"] == \
        str((moved / "configs" / "run_config.yaml").resolve())
