"""A start-up that only ticks is a hang (issue 34): litgpt's data loader whose workers died of
`OSError: AF_UNIX path too long` (a TMPDIR deep in a long out_dir) deadlocked at start-up while its
threads polled, 0.01 CPU-s per 30 s; since any CPU tick was a sign of life, only watch.startup_timeout_s
(4 h) would have caught it. CPU is now life only in bulk (watch.cpu_life_min_s over watch.cpu_life_window_s,
engine/observe/activity.py), and the trainer's TMPDIR stays short whatever out_dir's length
(engine/process/trainer_env.py). Real processes throughout, the toy trainer's run; the real litgpt run with
loader workers under a long out_dir is tests/litgpt/test_startup.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from engine.observe.activity import StartupActivity
from engine.process.trainer_env import MAX_TMPDIR_CHARS, release_short_tmpdir, short_link_name, short_tmpdir
from tests.conftest import REPO, make_toy_project, stop_process
from tests.toy_trainer.adapter import ToyAdapter

TICKING = "import time\nwhile True:\n    time.sleep(0.005); sum(range(300))\n"   # ~0.01-0.03 CPU-s per second
BUSY = "while True: sum(range(10000))\n"


class TickingStartAdapter(ToyAdapter):
    """The toy, whose first launch never gets past start-up: it ticks like the deadlocked loader (no output,
    no I/O, a little CPU) until it is stopped; the relaunch trains."""

    def prepare_launch(self, loaded, launch_dir: Path, resume_from, data_hash: str):
        spec = super().prepare_launch(loaded, launch_dir, resume_from, data_hash)
        marker = loaded.run_dir / "test-ticked-once"
        if marker.exists():
            return spec
        marker.write_text("the first launch ticks\n")
        return replace(spec, argv=[sys.executable, "-c", TICKING])


def seconds_idle(codes: dict[str, str], seconds: float = 8.0, window_s: float = 4.0, min_cpu_s: float = 0.5) -> dict[str, float]:
    """seconds_idle of one real process per code, side by side (one 8-second look for all), each sampled
    each second after its interpreter started."""
    procs = {name: subprocess.Popen([sys.executable, "-c", code]) for name, code in codes.items()}
    try:
        time.sleep(1.0)
        activities = {name: StartupActivity(time.time()) for name in procs}
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for name, proc in procs.items():
                activities[name].sample(proc.pid, time.time(), cpu_window_s=window_s, min_cpu_s=min_cpu_s)
            time.sleep(1.05)
        return {name: activity.seconds_idle(time.time()) for name, activity in activities.items()}
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def test_a_process_that_only_ticks_shows_no_life_and_a_busy_one_does():
    idle = seconds_idle({"ticking": TICKING, "busy": BUSY})
    ticking, busy = idle["ticking"], idle["busy"]
    print(f"ticking: idle {ticking:.1f} s of 8; busy: idle {busy:.1f} s (window 4 s, 0.5 CPU-s)")
    assert ticking >= 6.0, ticking
    assert busy <= 2.5, busy


def test_a_ticking_start_up_is_a_hang_within_window_plus_timeout_and_recovers(tmp_path):
    project = make_toy_project(tmp_path / "project", step_seconds=0.0)
    project.set(trainer={"kind": "python:tests.runs.test_startup_hang:TickingStartAdapter"},
                watch={"hang_timeout_s": 3.0, "cpu_life_window_s": 4.0, "cpu_life_min_s": 0.5, "startup_timeout_s": 600})
    started = time.time()
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        assert watcher.wait(timeout=90) == 0, project.watch_output()
    finally:
        stop_process(watcher)
    [incident] = project.incidents()
    assert incident["playbook"] == "hang" and incident["outcome"] == "recovered", incident
    assert incident["snapshot"]["trainer"]["phase"] == "startup"
    took = incident["detected_at"] - started
    print(f"ticking start-up -> hang incident {took:.1f} s after `watch` started (window 4 s + hang timeout 3 s)")
    assert took < 40, took   # before: no incident until startup_timeout_s (600 s here, 4 h by default)
    assert (project.out_dir / "final" / "state.json").is_file()


def test_a_long_tmpdir_is_handed_over_as_a_short_link_of_runbooks_own(tmp_path):
    target = tmp_path / ("x" * 100) / "tmp-runbook-0123456789-trainer"
    target.mkdir(parents=True)
    assert short_tmpdir("/tmp/short") == "/tmp/short" and len(str(target)) > MAX_TMPDIR_CHARS
    root = tmp_path / "r"
    root.mkdir()
    short = short_tmpdir(str(target), root)
    assert short == str(short_link_name(str(target), root)) and os.readlink(short) == str(target)
    assert short_tmpdir(str(target), root) == short   # every launch reuses the same link
    assert release_short_tmpdir(str(target), root) and not os.path.lexists(short) and target.is_dir()
    assert short_tmpdir(str(target), root) == short
    other = tmp_path / "elsewhere"
    other.mkdir()
    (tmp_path / "second").mkdir()
    second = tmp_path / "second" / ("y" * 100)
    second.mkdir()
    os.symlink(other, short_link_name(str(second), root))   # the name is taken by something not ours
    handed = short_tmpdir(str(second), root)
    assert os.readlink(short_link_name(str(second), root)) == str(other)   # left alone
    assert not release_short_tmpdir(str(second), root) and os.readlink(short_link_name(str(second), root)) == str(other)
    assert Path(handed).resolve() == second.resolve() and len(handed) < len(str(second))
