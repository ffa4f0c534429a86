"""The warm spare (engine/process/warm_spare.py, engine/process/spare_main.py) with real processes and a cheap import in
place of torch: started before the first launch, it becomes that launch (its environment, its log, its
exit in the launch's status file, back at the watcher's priority); until a launch has trained the next
spare starts at once, afterwards only once its launch trains; a variable the imports never read
(TORCH_DISTRIBUTED_DEBUG, set by the hang playbook) keeps it usable, one that may shape the imports
makes the launch cold and says why. Run as a module, this file is the
trainer the spare becomes."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from engine.process import warm_spare
from engine.process import autogroup
from engine.process.spare_main import WAIT_NICE, can_restore_priority
from engine.process.trainer_process import TrainerProcess
from engine.trainers.base import LaunchSpec
from tests.conftest import wait_for

REPO = Path(__file__).resolve().parents[2]
MODULE = "tests.runs.test_warm_spare"


def spec(tmp_path: Path, name: str, **env) -> LaunchSpec:
    return LaunchSpec(argv=[sys.executable, "-m", MODULE, str(tmp_path / f"{name}.json")],
                      env={**os.environ, "PYTHONPATH": str(REPO), **env}, cwd=REPO, config_file=Path("-"),
                      resume_from=None, warm_spare_dir=tmp_path / "spare", warm_imports=("json", "engine.process.ranks"),
                      training_marker="Epoch ")


def ready_spare(pool: warm_spare.SparePool) -> warm_spare.Spare:
    wait_for(lambda: pool.current is not None, 30, interval=0.01, what="the spare to be started")
    spare = pool.current
    assert spare.wait_ready(60), (spare.folder / "spare.log").read_text()
    return spare


def run(tmp_path: Path, name: str, launch_spec: LaunchSpec, pool: warm_spare.SparePool) -> tuple[TrainerProcess, str, dict]:
    log, status = tmp_path / f"{name}.log", tmp_path / f"{name}-status.json"
    process = TrainerProcess.launch(launch_spec, log, status, pool)
    assert process.wait_exit(60), log.read_text()
    wait_for(lambda: "exit_code" in json.loads(status.read_text()), 30, what=f"{name}'s exit in its status file")
    return process, log.read_text(), json.loads(status.read_text())


@pytest.fixture
def pool():
    spares = warm_spare.SparePool()
    yield spares
    spares.discard()


def test_a_prestarted_spare_becomes_the_first_launch_and_later_spares_start_as_the_runs_progress(tmp_path, pool):
    first = spec(tmp_path, "first", RUNBOOK_ROLE="a", TORCH_DISTRIBUTED_DEBUG="OFF")
    pool.prestart(first)
    spare = ready_spare(pool)
    if can_restore_priority(os.getpriority(os.PRIO_PROCESS, 0)):
        assert psutil.Process(spare.pid).nice() == min(19, os.getpriority(os.PRIO_PROCESS, 0) + WAIT_NICE)
        assert os.sched_getscheduler(spare.pid) == os.SCHED_IDLE   # it waits on CPU nothing else wants
        if autogroup.enabled():   # alone in its session: the session's group is what lowers its share
            assert autogroup.group_nice(spare.pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + WAIT_NICE)

    # The launch differs only in variables read after the imports: it is the spare.
    launch1 = spec(tmp_path, "first", RUNBOOK_ROLE="b", TORCH_DISTRIBUTED_DEBUG="DETAIL")
    process, log, status = run(tmp_path, "launch-1", launch1, pool)
    assert log.startswith(f"runbook: warm spare pid {spare.pid} ") and process.pid == spare.pid, log
    assert status["exit_code"] == 0 and status["trainer_pid"] == spare.pid, status
    seen = json.loads((tmp_path / "first.json").read_text())
    assert seen["role"] == "b" and seen["argv"] == [str(tmp_path / "first.json")]
    assert seen["torch_distributed_debug"] == "DETAIL"
    assert seen["nice"] == os.getpriority(os.PRIO_PROCESS, 0)   # back at the watcher's priority
    assert seen["policy"] == os.SCHED_OTHER                    # and the normal scheduling class
    assert seen["group_nice"] == (os.getpriority(os.PRIO_PROCESS, 0) if autogroup.enabled() else None)

    # The next launch's spare was started with launch 1, not after it trained.
    following = ready_spare(pool)
    following_pid = following.pid   # its folder goes when it is discarded
    assert following_pid != spare.pid
    # A variable that may shape the imports differs: a cold launch, and its log says why.
    process, log, status = run(tmp_path, "launch-2", spec(tmp_path, "second", RUNBOOK_ROLE="c", OMP_NUM_THREADS="7"), pool)
    assert "warm spare not used (started for another launch shape: environment: OMP_NUM_THREADS)" in log, log
    assert process.pid != following_pid and status["exit_code"] == 0
    assert json.loads((tmp_path / "second.json").read_text())["role"] == "c"
    wait_for(lambda: not psutil.pid_exists(following_pid) or psutil.Process(following_pid).status() == psutil.STATUS_ZOMBIE,
             30, what="the discarded spare to end")

    # Launch 3 trains (its log shows the training marker): from now on the next spare waits for its launch to
    # train, so a spare's imports never compete with a relaunch's own start.
    ready_spare(pool)
    _, log, _ = run(tmp_path, "launch-3", spec(tmp_path, "third", OMP_NUM_THREADS="7", RUNBOOK_TRAIN="1"), pool)
    assert log.startswith("runbook: warm spare pid") and "Epoch 1 | iter 1 step 1" in log, log
    wait_for(lambda: pool.trained, 30, interval=0.05, what="the marker to be seen")
    ready_spare(pool)
    _, log, _ = run(tmp_path, "launch-4", spec(tmp_path, "fourth", OMP_NUM_THREADS="7"), pool)
    assert log.startswith("runbook: warm spare pid"), log
    time.sleep(1.0)   # several polls of launch 4's log, which never shows the marker
    assert pool.current is None
    _, log, _ = run(tmp_path, "launch-5", spec(tmp_path, "fifth", OMP_NUM_THREADS="7"), pool)
    assert log.startswith("runbook: no warm spare (none started: the launch before never reached training)"), log


def test_the_late_variables_are_left_out_of_the_spares_shape():
    env = {"PATH": "/bin", "TORCH_DISTRIBUTED_DEBUG": "DETAIL", "NCCL_DEBUG": "INFO", "RUNBOOK_X": "1", "OMP_NUM_THREADS": "2"}
    assert warm_spare.early_env(env) == {"PATH": "/bin", "OMP_NUM_THREADS": "2"}


if __name__ == "__main__":   # the trainer a spare becomes (runpy, as engine/process/spare_main.py runs a launch)
    if os.environ.get("RUNBOOK_TRAIN"):
        print("Epoch 1 | iter 1 step 1 | loss train: 6.000", flush=True)
        time.sleep(0.5)
    Path(sys.argv[1]).write_text(json.dumps({
        "role": os.environ.get("RUNBOOK_ROLE"), "argv": sys.argv[1:], "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "policy": os.sched_getscheduler(0), "group_nice": autogroup.group_nice(),
        "torch_distributed_debug": os.environ.get("TORCH_DISTRIBUTED_DEBUG")}))
