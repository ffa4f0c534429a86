"""A real folder (or file) named `last` in out_dir (issue 34): the watcher died with IsADirectoryError
(exit 12) at every rerun while `check` said ready. Now `check` names it (exit 3), `watch` refuses in one
sentence with exit 18 before launching anything, and the user's folder or file is never moved or deleted.
Real `runbook` processes on the toy trainer."""

from __future__ import annotations

import os
import subprocess

from engine.checkpoints.last_link import update_last_link
from engine.checkpoints.store import Checkpoint
from tests.conftest import REPO, RUNBOOK, stop_process
from tests.runs.test_toy_trainer import make_toy_project
from tests.toy_trainer.adapter import ToyAdapter

TOY_ENV = {"PYTHONPATH": str(REPO)}


def test_a_folder_named_last_is_reported_by_check_and_refused_by_watch_and_kept(tmp_path):
    project = make_toy_project(tmp_path / "project", step_seconds=0.0)
    mine = project.out_dir / "last"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("my notes\n")
    check = subprocess.run([RUNBOOK, "check", str(project.config)], capture_output=True, text=True,
                           cwd=project.root, env={**os.environ, **TOY_ENV}, timeout=120)
    assert check.returncode == 3, check.stdout + check.stderr
    assert f"{mine} is a folder, not runbook's `last` link" in check.stderr, check.stderr
    assert "run_config.yaml" in check.stderr   # where out_dir is set
    for _ in range(2):   # every rerun: the same refusal, never a crash
        watcher = project.watch(env=TOY_ENV)
        try:
            assert watcher.wait(timeout=120) == 18, project.watch_output()
        finally:
            stop_process(watcher)
    out = project.watch_output()
    assert f"{mine} is a folder, not runbook's `last` link" in out and "IsADirectoryError" not in out, out
    assert not (project.run_dir / "launches").exists(), "a trainer was launched"
    assert (mine / "notes.txt").read_text() == "my notes\n" and sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_the_last_link_never_replaces_a_users_file_named_last(tmp_path):
    out_dir = tmp_path / "out"
    (out_dir / "ckpt-000005").mkdir(parents=True)
    (out_dir / "last").write_text("a user's file\n")
    assert update_last_link(out_dir, Checkpoint(out_dir / "ckpt-000005", 5, ToyAdapter().layout)) is False
    assert (out_dir / "last").read_text() == "a user's file\n"
    (out_dir / "last").unlink()
    assert update_last_link(out_dir, Checkpoint(out_dir / "ckpt-000005", 5, ToyAdapter().layout)) is True
    assert os.readlink(out_dir / "last") == "ckpt-000005"
