"""engine/process/identity.py's search of the process table (benchmarks/bench_mutation.py's survivors): which
live processes are this run folder's launchers, and which of their trainers still run. Real processes: a
stand-in `launcher.py` that sleeps (the search reads argv, not the program) and a `sleep` as its trainer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from engine.process.identity import _exists, live_launchers_of, live_trainers_of, start_ticks

SLEEPS = "import time; time.sleep(60)\n"


@pytest.fixture
def spawn():
    procs: list[subprocess.Popen] = []

    def start(argv, cwd=None) -> subprocess.Popen:
        proc = subprocess.Popen([str(a) for a in argv], cwd=cwd, stdin=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.fixture
def world(tmp_path):
    program = tmp_path / "engine" / "launcher.py"
    program.parent.mkdir()
    program.write_text(SLEEPS)
    run_dir = tmp_path / "run"
    status = run_dir / "launches" / "launch-0001" / "launcher.json"
    status.parent.mkdir(parents=True)
    return program, run_dir, status


def until(predicate, seconds: float = 5.0):
    """argv shows in /proc once the interpreter has exec'd: wait for it (bounded)."""
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.01)


def test_a_launcher_of_this_run_folder_is_found_by_its_status_path(world, spawn):
    program, run_dir, status = world
    launcher = spawn([sys.executable, program, status])
    assert until(lambda: live_launchers_of(run_dir)) == [(launcher.pid, Path(os.path.realpath(status)))]


def test_a_relative_status_path_is_read_from_the_launchers_folder(world, spawn):
    program, run_dir, status = world
    launcher = spawn([sys.executable, program, status.relative_to(run_dir)], cwd=run_dir)
    assert until(lambda: live_launchers_of(run_dir)) == [(launcher.pid, Path(os.path.realpath(status)))]


def test_processes_that_are_not_this_run_folders_launchers_are_not_found(world, spawn, tmp_path):
    program, run_dir, status = world
    elsewhere = tmp_path / "other-run" / "launches" / "launch-0001" / "launcher.json"
    not_a_launch = run_dir / "spares" / "launcher.json"
    spawn([sys.executable, program])                               # no status file named
    spawn([sys.executable, program, elsewhere])                    # another run folder's
    spawn([sys.executable, program, not_a_launch])                 # a warm spare never adopted
    spawn([sys.executable, "-X", "utf8", program, status])         # launcher.py past argv's third word
    spawn([sys.executable, "-c", SLEEPS, status])                  # no launcher.py at all
    time.sleep(0.3)
    assert live_launchers_of(run_dir) == []


def test_an_adopted_warm_spare_is_a_launcher_of_this_run(world, spawn):
    program, run_dir, _status = world
    spare = run_dir / "spares" / "launcher.json"
    spare.parent.mkdir()
    Path(str(spare) + ".redirect").write_text("launches/launch-0002/launcher.json\n")
    launcher = spawn([sys.executable, program, spare])
    assert until(lambda: live_launchers_of(run_dir)) == [(launcher.pid, spare)]


def test_an_ended_launcher_is_not_found(world, spawn):
    program, run_dir, status = world
    launcher = spawn([sys.executable, program, status])
    assert until(lambda: live_launchers_of(run_dir))
    launcher.kill()
    launcher.wait()
    assert live_launchers_of(run_dir) == []


def write_status(path: Path, **record) -> None:
    path.write_text(json.dumps(record))


def test_the_trainer_a_live_launcher_names_is_a_live_trainer(world, spawn):
    program, run_dir, status = world
    trainer = spawn(["sleep", "60"])
    write_status(status, trainer_pid=trainer.pid, trainer_start_ticks=start_ticks(trainer.pid))
    spawn([sys.executable, program, status])
    assert until(lambda: live_trainers_of(run_dir)) == [(trainer.pid, Path(os.path.realpath(status)))]
    assert live_trainers_of(run_dir, except_pid=trainer.pid) == []          # the one this watcher controls
    write_status(status, trainer_pid=trainer.pid)                           # an older launcher: no ticks
    assert live_trainers_of(run_dir) == [(trainer.pid, Path(os.path.realpath(status)))]


@pytest.mark.parametrize("how", ["exit recorded", "wrong ticks", "trainer gone", "no pid", "pid not a number",
                                 "unreadable record", "not an object"])
def test_a_trainer_that_ended_or_cannot_be_the_one_recorded_is_not_live(world, spawn, how):
    program, run_dir, status = world
    trainer = spawn(["sleep", "60"])
    ticks = start_ticks(trainer.pid)
    record = {"trainer_pid": trainer.pid, "trainer_start_ticks": ticks}
    if how == "exit recorded":
        record["exit_code"] = 0
    elif how == "wrong ticks":
        record["trainer_start_ticks"] = ticks + 1
    elif how == "trainer gone":
        trainer.kill()
        trainer.wait()
    elif how == "no pid":
        del record["trainer_pid"]
    elif how == "pid not a number":
        record["trainer_pid"] = str(trainer.pid)
    write_status(status, **record)
    if how == "unreadable record":
        status.write_text("{not json")
    elif how == "not an object":
        status.write_text(json.dumps([trainer.pid]))
    spawn([sys.executable, program, status])
    assert until(lambda: live_launchers_of(run_dir))
    assert live_trainers_of(run_dir) == []


def test_a_zombie_does_not_exist_and_a_live_process_does(spawn):
    proc = spawn(["sleep", "60"])
    assert _exists(proc.pid) is True
    proc.kill()
    until(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE)
    assert _exists(proc.pid) is False
    proc.wait()
    assert _exists(proc.pid) is False
