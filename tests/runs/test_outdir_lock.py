"""One run per out_dir (issue 34): two projects pointing at one out_dir, with real `runbook watch`
processes on the toy trainer. The second is refused with exit 17 whether the first is live or finished,
touches nothing in the out_dir, and `runbook check` says why; the claim itself is an flock plus an owner
marker (engine/checkpoints/out_dir_claim.py), checked here directly too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from engine.checkpoints.out_dir_claim import OutDirClaim, OutDirTaken, owner_problem
from engine.core.run_folder import RunFolder
from tests.conftest import REPO, RUNBOOK, stop_process, wait_for
from tests.runs.test_toy_trainer import make_toy_project

TOY_ENV = {"PYTHONPATH": str(REPO)}   # the watcher imports tests.toy_trainer


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under folder with its size and mtime: what "untouched" means."""
    return {str(p.relative_to(folder)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def second_project_on(tmp_path: Path, out_dir: Path):
    other = make_toy_project(tmp_path / "other")
    other.set(out_dir=str(out_dir))
    other.out_dir = out_dir
    return other


def run_cli(project, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([RUNBOOK, *args, str(project.config)], capture_output=True, text=True, cwd=project.root,
                          env={**os.environ, **TOY_ENV}, timeout=120)


def test_a_second_project_on_a_live_runs_out_dir_is_refused_and_touches_nothing(tmp_path):
    # The first run is kept live by holding its trainer (SIGSTOP) for as long as the second project is tried,
    # however long that takes on a loaded machine; a hang timeout above that keeps it an undisturbed run.
    first = make_toy_project(tmp_path / "first", step_seconds=0.05, watch={"hang_floor_s": 300, "hang_timeout_s": 300})
    watcher, trainer = first.watch(env=TOY_ENV), None
    try:
        wait_for(lambda: any(first.out_dir.glob("ckpt-*/runbook-manifest.json")), 60, what="a sealed checkpoint")
        trainer = first.trainer_pid()
        os.kill(trainer, signal.SIGSTOP)
        other = second_project_on(tmp_path, first.out_dir)
        check = run_cli(other, "check")
        assert check.returncode == 3, check.stdout + check.stderr
        assert "belongs to another run" in check.stderr and "its watcher is running now" in check.stderr, check.stderr
        before = {k: v for k, v in listing(first.out_dir).items() if k.startswith("ckpt-")}
        refused = other.watch(env=TOY_ENV)
        assert refused.wait(timeout=120) == 17, other.watch_output()
        out = other.watch_output()
        assert f"run_dir {first.run_dir.resolve()}" in out and "its watcher is running now" in out, out
        assert not (other.run_dir / "launches").exists(), "the refused watcher launched a trainer"
        after = {k: v for k, v in listing(first.out_dir).items() if k in before}
        assert after == before   # nothing of the first run's checkpoints sealed again, moved or pruned
        assert watcher.poll() is None, first.watch_output()   # live all along
        os.kill(trainer, signal.SIGCONT)
        assert watcher.wait(timeout=120) == 0, first.watch_output()
    finally:
        if trainer is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(trainer, signal.SIGCONT)   # a failed assertion leaves no stopped trainer behind
        stop_process(watcher)
    assert (first.out_dir / "final" / "state.json").is_file()


def test_a_finished_runs_out_dir_is_refused_to_another_project_and_left_as_it_was(tmp_path):
    first = make_toy_project(tmp_path / "first", step_seconds=0.0)
    watcher = first.watch(env=TOY_ENV)
    try:
        assert watcher.wait(timeout=120) == 0, first.watch_output()
    finally:
        stop_process(watcher)
    before = listing(first.out_dir)
    other = second_project_on(tmp_path, first.out_dir)
    refused = other.watch(env=TOY_ENV)
    try:
        assert refused.wait(timeout=120) == 17, other.watch_output()
    finally:
        stop_process(refused)
    assert "no watcher of it is running now" in other.watch_output(), other.watch_output()
    assert listing(first.out_dir) == before
    # The owning run itself is never refused its own out_dir (it says it already completed).
    again = first.watch(env=TOY_ENV)
    try:
        assert again.wait(timeout=120) == 0, first.watch_output()
    finally:
        stop_process(again)


def test_two_claims_on_one_out_dir_exclude_each_other_and_a_bad_marker_is_never_overwritten(tmp_path):
    out_dir = tmp_path / "out"
    a, b = RunFolder(tmp_path / "run-a"), RunFolder(tmp_path / "run-b")
    with OutDirClaim(out_dir, a, tmp_path / "a.yaml"):
        marker = json.loads((out_dir / "runbook-owner.json").read_text())
        assert marker["run_id"] == a.run_id.read_text().strip() and marker["run_dir"] == str(a.root.resolve())
        with pytest.raises(OutDirTaken, match="its watcher is running now"):
            OutDirClaim(out_dir, b, tmp_path / "b.yaml").acquire()
        with pytest.raises(OutDirTaken, match="claimed by another watcher of this same run"):
            OutDirClaim(out_dir, a, tmp_path / "a.yaml").acquire()
        assert owner_problem(out_dir, a) is None and "belongs to another run" in owner_problem(out_dir, b)
    with OutDirClaim(out_dir, a, tmp_path / "a.yaml"):   # the same run again, after its watcher ended
        pass
    with pytest.raises(OutDirTaken, match="no watcher of it is running now"):
        OutDirClaim(out_dir, b, tmp_path / "b.yaml").acquire()
    (out_dir / "runbook-owner.json").write_text("{not json")
    with pytest.raises(OutDirTaken, match="cannot be read"):
        OutDirClaim(out_dir, a, tmp_path / "a.yaml").acquire()
    assert (out_dir / "runbook-owner.json").read_text() == "{not json"
