"""Start-up is not a hang (issue 24 item 4): a real litgpt launch that tokenizes its corpus for many
times the hang timeout is left alone, and a start-up frozen by SIGSTOP is still caught as a hang.

Before its first progress line a launch is judged by its signs of life (output, CPU time and I/O of
its whole process tree: litdata's spawned workers print nothing for long stretches), not by progress
lines; see engine/observe/activity.py and the `stalled` clause."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import psutil

from tests.conftest import make_project, stop_process, wait_for
import pytest


# Transitional: these tests still run the real litgpt trainer (tests/conftest.py's `project` is the toy's).
@pytest.fixture
def project(litgpt_project):
    return litgpt_project


HANG_TIMEOUT_S = 4.0
PROGRESS = re.compile(r"^Epoch \d+ \| iter \d+ step \d+ \|", re.M)


def _trainer_log(project) -> str:
    logs = sorted((project.run_dir / "logs").glob("trainer-*.log")) if (project.run_dir / "logs").exists() else []
    return logs[-1].read_text(errors="replace") if logs else ""


def _launch_time(project, launch: int = 1) -> float:
    for line in (project.run_dir / "journal.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry.get("kind") == "launch" and entry.get("launch") == launch:
            return entry["time"]
    raise AssertionError(f"no launch {launch} in the journal")


def test_a_real_preprocessing_many_times_the_hang_timeout_is_not_a_hang(tmp_path, shared_data):
    # No seeded data cache: the launch tokenizes the corpus itself (litdata optimize, spawned workers).
    # 16 optimizer steps after it: the hang timeout judges training too, and training is not the point.
    project = make_project(tmp_path / "project", shared_data, prebuilt_data=False, max_tokens=16384, save_interval=8)
    project.set(watch={"hang_timeout_s": HANG_TIMEOUT_S})
    watcher = project.watch()
    built = first_progress = None
    try:
        deadline = time.monotonic() + 300
        while watcher.poll() is None and time.monotonic() < deadline:
            log = _trainer_log(project)
            if built is None and "runbook: data cache built" in log:
                built = time.time()
            if first_progress is None and PROGRESS.search(log):
                first_progress = time.time()
            time.sleep(0.1)
        code = watcher.wait(timeout=5)
    finally:
        stop_process(watcher)
    assert code == 0, project.watch_output()
    launched = _launch_time(project)
    assert built is not None and first_progress is not None, _trainer_log(project)[-3000:]
    preprocessing, startup = built - launched, first_progress - launched
    figures = (f"preprocessing {preprocessing:.1f} s, start-up to the first progress line {startup:.1f} s, "
               f"hang_timeout_s {HANG_TIMEOUT_S:g} s ({preprocessing / HANG_TIMEOUT_S:.1f}x)")
    hangs = [i for i in project.incidents() if i["playbook"] == "hang"]
    in_startup = [i["snapshot"]["trainer"] for i in hangs if i["snapshot"]["trainer"]["phase"] == "startup"]
    assert not in_startup, f"{figures}; start-up called a hang: {in_startup}"
    # A training step slower than the 4 s timeout would be a hang by this config's own word (seen only on
    # a machine loaded far past its cores): counted, not failed; the start-up is what this test is about.
    figures += f"; training hangs: {len(hangs)}"
    assert preprocessing >= 3 * HANG_TIMEOUT_S, f"the corpus tokenized too fast to prove anything: {figures}"
    assert (project.out_dir / "final" / "lit_model.pth").exists(), figures
    print(figures)   # docs/benchmarks.md, "Start-up is not a hang"


def _stop_tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    tree = [root, *root.children(recursive=True)]
    for proc in tree:
        try:
            os.kill(proc.pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass
    return tree


def test_a_start_up_frozen_by_sigstop_is_a_hang_within_the_timeout_and_recovers(project):
    project.set(watch={"hang_timeout_s": HANG_TIMEOUT_S})
    watcher = project.watch()
    tree: list[psutil.Process] = []

    def recovered() -> dict | None:
        done = [i for i in project.incidents() if i["playbook"] == "hang" and i.get("first_progress_at")]
        return done[0] if done else None

    try:
        # The seeded data cache makes the launch litgpt itself: stopped in its imports and model build.
        wait_for(lambda: (project.run_dir / "trainer.pid").exists(), 120, interval=0.05, what="the launch")
        tree = _stop_tree(project.trainer_pid())
        stopped_at = time.time()
        assert not PROGRESS.search(_trainer_log(project)), "the trainer was already training"
        # Recovered: the relaunch trains (its first progress line); the rest of the run is other tests' business.
        wait_for(recovered, 240, interval=0.2, what="the relaunch's first progress line")
    finally:
        stop_process(watcher)
        for proc in tree:   # whatever of the stopped tree outlived the recovery's stop
            try:
                proc.kill()
            except psutil.Error:
                pass
    incident = recovered()
    snapshot = incident["snapshot"]
    assert incident["outcome"] == "recovered" and incident["id"] == "incident-1", incident["outcome"]
    assert snapshot["trainer"]["phase"] == "startup" and snapshot["trainer"]["stopped"] is True
    waited = incident["detected_at"] - stopped_at
    figures = (f"SIGSTOP -> hang incident {waited:.1f} s (hang_timeout_s {HANG_TIMEOUT_S:g} s, no sign of life for "
               f"{snapshot['trainer']['seconds_since_activity']:.1f} s); relaunch -> first progress line "
               f"{incident['first_progress_at'] - incident['detected_at']:.1f} s")
    # the timeout plus the watcher's sampling and a loaded CI worker's delays (7.1 s seen on two busy workers);
    # the fault it guards against is the start-up timeout's hours
    assert waited <= HANG_TIMEOUT_S + 5.0, figures
    print(figures)   # docs/benchmarks.md, "Start-up is not a hang"
