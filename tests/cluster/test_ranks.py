"""Several ranks supervised rank by rank: the pure rank model, then real 2-rank litgpt training (DDP over
gloo on the CPU) broken from outside one rank at a time, each fault recovered by its playbook with
step/token parity against the undisturbed 2-rank run."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from engine.process.ranks import RankExit, RankHeartbeat, RankWatch, exit_path, heartbeat_path, ranks_status, read_folder, write_record
from tests.conftest import make_project, require_capability, stop_process, wait_for

NOW = 1000.0


def beat(rank: int, iter_num: int = 10, phase: str = "work", age: float = 0.1, work: float | None = 0.01, **kw) -> RankHeartbeat:
    return RankHeartbeat(rank=rank, world_size=2, pid=100 + rank, started=1.0, step=iter_num // 2, iter_num=iter_num,
                         phase=phase, time=NOW - age, work_seconds=work, **kw)


def test_one_process_has_no_ranks():
    assert ranks_status({}, {}, {}, NOW).world_size == 1
    single = {0: beat(0).model_copy(update={"world_size": 1})}
    assert ranks_status(single, {}, {0: "running"}, NOW).ranks == []


def test_the_rank_that_died_first_is_the_cause():
    beats = {0: beat(0), 1: beat(1)}
    exits = {1: RankExit(rank=1, pid=101, exit_code=-9, ended=NOW - 2)}
    status = ranks_status(beats, exits, {0: None, 1: None}, NOW, rank0_exit=(1, NOW - 1))
    assert status.first_failed == 1 and status.failed == [0, 1] and status.exited == [0, 1]
    assert status.ranks[1].signal == "SIGKILL" == status.first_failed_signal and status.ranks[0].exit_code == 1
    # rank 0 first: the other rank's exit unknown (its reaper died with rank 0)
    status = ranks_status(beats, {}, {0: None, 1: "running"}, NOW, rank0_exit=(-9, NOW))
    assert status.first_failed == 0 and status.exited == [0]


def test_stalled_ranks_are_the_stopped_and_the_ones_left_behind():
    running = {0: "running", 1: "running"}
    stopped = ranks_status({0: beat(0), 1: beat(1)}, {}, {0: "running", 1: "stopped"}, NOW)
    assert stopped.stopped == [1] and stopped.stalled == [1]
    # rank 0 waits in the all-reduce of micro-batch 10 while rank 1 is still on its own work
    behind = {0: beat(0, phase="sync", age=6), 1: beat(1, phase="work", age=6)}
    assert ranks_status(behind, {}, running, NOW).stalled == [1]
    assert ranks_status({0: beat(0, phase="sync", age=1), 1: beat(1, age=1)}, {}, running, NOW).stalled == []
    assert ranks_status({0: beat(0, iter_num=11, age=9), 1: beat(1, age=9)}, {}, running, NOW).stalled == [1]
    # a rank whose micro-batch takes 1 s is given 20 s before it counts as behind
    slow = {0: beat(0, phase="sync", age=8, work=1.0), 1: beat(1, age=8, work=1.0)}
    assert ranks_status(slow, {}, running, NOW).stalled == []


def test_a_straggler_is_over_the_factor_of_the_median():
    status = ranks_status({0: beat(0, work=0.01), 1: beat(1, work=0.2)}, {}, {0: "running", 1: "running"}, NOW)
    assert status.straggler == 1 and status.straggler_ratio == pytest.approx(20.0)
    even = ranks_status({0: beat(0, work=0.01), 1: beat(1, work=0.012)}, {}, {0: "running", 1: "running"}, NOW)
    assert even.straggler is None


def test_the_folder_reader_passes_over_bad_and_foreign_files(tmp_path):
    write_record(heartbeat_path(tmp_path, 0), beat(0))
    write_record(exit_path(tmp_path, 1), RankExit(rank=1, pid=101, exit_code=-9, ended=NOW))
    (tmp_path / "rank-1.json").write_text("{not json")
    (tmp_path / "rank-2.json").write_text(json.dumps(beat(3).model_dump()))   # names another rank
    (tmp_path / "rank-4.json").write_bytes(b"x" * 100_000)
    beats, exits = read_folder(tmp_path)
    assert list(beats) == [0] and list(exits) == [1]
    assert read_folder(tmp_path / "missing") == ({}, {})


def test_leftovers_are_only_processes_whose_start_time_matches(tmp_path):
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = psutil.Process(child.pid).create_time()
        write_record(heartbeat_path(tmp_path, 1), RankHeartbeat(rank=1, world_size=2, pid=child.pid, started=started + 50,
                                                                 time=NOW))
        assert RankWatch(tmp_path).stop_leftovers(1.0) == []      # same pid, another start time: not ours
        assert child.poll() is None
        write_record(heartbeat_path(tmp_path, 1), RankHeartbeat(rank=1, world_size=2, pid=child.pid, started=started, time=NOW))
        os.kill(child.pid, signal.SIGSTOP)
        assert RankWatch(tmp_path).stop_leftovers(2.0) == [f"rank 1 (pid {child.pid})"]
        assert child.wait(timeout=5) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()


# --- real 2-rank litgpt training -------------------------------------------------------------------

TWO_RANKS = {"trainer": {"devices": 2}}


def launch_ranks(project, launch: int) -> Path:
    return project.run_dir / "launches" / f"launch-{launch:03d}" / "ranks"


def heartbeat(project, launch: int, rank: int) -> RankHeartbeat | None:
    beats, _ = read_folder(launch_ranks(project, launch))
    return beats.get(rank)


@pytest.fixture(scope="module")
def two_rank_reference(tmp_path_factory, shared_data) -> dict:
    project = make_project(tmp_path_factory.mktemp("ranks-reference") / "project", shared_data, **TWO_RANKS)
    watcher = project.watch()
    try:
        assert watcher.wait(timeout=300) == 0, project.watch_output()
    finally:
        stop_process(watcher)
    return {"project": project, "progress": project.final_progress()}


def test_two_ranks_train_with_ddp_over_gloo_and_each_rank_beats(two_rank_reference):
    project = two_rank_reference["project"]
    log = next((project.run_dir / "logs").glob("trainer-*.log")).read_text()
    assert "distributed_backend=gloo" in log and "GLOBAL_RANK: 1, MEMBER: 2/2" in log
    beats, _ = read_folder(launch_ranks(project, 1))
    assert sorted(beats) == [0, 1] and {b.world_size for b in beats.values()} == {2}
    assert beats[0].pid != beats[1].pid and beats[0].step == beats[1].step == 40
    assert all(b.work_seconds and b.work_seconds > 0 for b in beats.values())
    progress = two_rank_reference["progress"]
    # 40 960 tokens: 2 ranks x 80 micro-batches x 4 sequences x 64 tokens, 40 optimizer steps
    assert progress["step_count"] == 40 and progress["iter_num"] == 80
    assert project.incidents() == []


CGROUP_CPU = Path("/sys/fs/cgroup/cpu")   # cgroup v1's cpu controller (where the kernel offers it writable)


class CpuQuota:
    """One process held to 0.05 cores by a cgroup of its own: a rank whose core another job takes.
    (A SIGSTOP/SIGCONT duty cycle is no straggler by this measure: the stops land mostly while the rank
    waits in the all-reduce, so its own work stays short; the diagnosis names such a rank as stopped.)"""

    def __init__(self, pid: int):
        self.pid, self.folder = pid, CGROUP_CPU / f"runbook-test-rank-{pid}"

    @staticmethod
    def unavailable() -> str | None:
        if os.geteuid() != 0:
            return "a CPU quota on one rank needs root (cgroup v1 cpu controller)"
        if not os.access(CGROUP_CPU / "cgroup.procs", os.W_OK):
            return f"no writable cgroup v1 cpu controller at {CGROUP_CPU}"
        return None

    def __enter__(self):
        self.folder.mkdir()
        (self.folder / "cpu.cfs_period_us").write_text("100000")
        (self.folder / "cpu.cfs_quota_us").write_text("5000")
        (self.folder / "cgroup.procs").write_text(str(self.pid))
        return self

    def __exit__(self, *exc) -> None:
        try:
            (CGROUP_CPU / "cgroup.procs").write_text(str(self.pid))
        except OSError:
            pass   # the rank is gone
        time.sleep(0.1)
        self.folder.rmdir()


def _past(project, launch: int, rank: int, step: int) -> bool:
    found = heartbeat(project, launch, rank)
    return found is not None and found.step is not None and found.step >= step


@pytest.fixture(scope="module")
def faulted_two_ranks(tmp_path_factory, shared_data, two_rank_reference) -> dict:
    """One run, three faults on rank 1, one per launch: SIGKILL after checkpoint 10, SIGSTOP in the
    relaunch, a CPU quota of 0.05 cores in the next one."""
    project = make_project(tmp_path_factory.mktemp("ranks-faults") / "project", shared_data, **TWO_RANKS)
    # A hang floor shorter than the default (the timeout before the first progress line stays long:
    # start-up is not a hang), and a collective timeout so rank 0 never blocks for gloo's 30 minutes.
    project.set(watch={"hang_floor_s": 15.0, "hang_timeout_s": 120},
                trainer={"devices": 2, "env": {"RUNBOOK_COLLECTIVE_TIMEOUT_S": "90"}})
    watcher = project.watch()
    found: dict = {"project": project}
    try:
        wait_for(lambda: _past(project, 1, 1, 11) and (project.step_dir(10) / "lit_model.pth").exists(), 240,
                 interval=0.02, what="step 11 on rank 1")
        found["killed_pid"] = heartbeat(project, 1, 1).pid
        os.kill(found["killed_pid"], signal.SIGKILL)

        wait_for(lambda: _past(project, 2, 1, 12), 240, interval=0.02, what="rank 1 of launch 2 past step 12")
        found["stopped_pid"] = heartbeat(project, 2, 1).pid
        os.kill(found["stopped_pid"], signal.SIGSTOP)
        found["stopped_at"] = time.time()

        wait_for(lambda: _past(project, 3, 1, 13), 240, interval=0.02, what="rank 1 of launch 3 past step 13")
        found["slowed_pid"] = heartbeat(project, 3, 1).pid
        found["quota_skipped"] = CpuQuota.unavailable()
        if found["quota_skipped"] is None:
            with CpuQuota(found["slowed_pid"]):
                wait_for(lambda: any(i["playbook"] == "rank-straggler" for i in project.incidents()), 120,
                         what="a rank-straggler incident")
                time.sleep(3)   # the diagnosis samples the slowed rank
        found["rc"] = watcher.wait(timeout=400)
    finally:
        stop_process(watcher)
    return found


def test_a_killed_rank_is_one_incident_naming_it_and_the_group_resumes(faulted_two_ranks, two_rank_reference):
    project = faulted_two_ranks["project"]
    assert faulted_two_ranks["rc"] == 0, project.watch_output()
    incidents = project.incidents()
    playbooks = [i["playbook"] for i in incidents]
    if faulted_two_ranks["quota_skipped"]:   # no CPU quota was put on launch 3's rank 1: nothing slowed it
        assert playbooks == ["rank-died", "rank-hang"], (faulted_two_ranks["quota_skipped"], playbooks)
    else:                                    # the quota (CI's machine): the third launch's straggler is the third incident
        assert playbooks == ["rank-died", "rank-hang", "rank-straggler"], playbooks
    died = incidents[0]
    ranks = died["snapshot"]["trainer"]["ranks"]
    assert ranks["world_size"] == 2 and ranks["first_failed"] == 1 and ranks["first_failed_signal"] == "SIGKILL"
    assert ranks["ranks"][1]["signal"] == "SIGKILL" and ranks["ranks"][1]["pid"] == faulted_two_ranks["killed_pid"]
    assert any(f"rank 1 (pid {faulted_two_ranks['killed_pid']}) died first (SIGKILL)" in n for n in died["notes"]), died["notes"]
    assert died["outcome"] == "recovered"
    assert project.final_progress() == two_rank_reference["progress"]


def test_a_stopped_rank_is_named_as_the_hang_and_the_whole_group_is_replaced(faulted_two_ranks, two_rank_reference):
    project = faulted_two_ranks["project"]
    assert faulted_two_ranks["rc"] == 0, project.watch_output()
    hang = next(i for i in project.incidents() if i["playbook"] == "rank-hang")
    pid = faulted_two_ranks["stopped_pid"]
    named = f"rank 1 (pid {pid}, stopped: process state T"
    assert any(named in n for n in hang["notes"]), hang["notes"]
    assert f"rank 1 (pid {pid}" in project.run_log.read_text()   # the notes, or the stop's detail in an "Again" entry
    assert hang["snapshot"]["trainer"]["ranks"]["stalled"] == [1]
    assert hang["detected_at"] - faulted_two_ranks["stopped_at"] <= hang["snapshot"]["hang_timeout_s"] + 3
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    journal = (project.run_dir / "journal.jsonl").read_text()
    assert '"TORCH_DISTRIBUTED_DEBUG": "DETAIL"' in journal
    assert project.final_progress() == two_rank_reference["progress"]



def test_a_rank_held_to_a_cpu_quota_is_named_as_the_straggler(faulted_two_ranks, two_rank_reference):
    if faulted_two_ranks["quota_skipped"]:
        require_capability(faulted_two_ranks["quota_skipped"])   # a skip here, a failure where CI runs (root)
    project, pid = faulted_two_ranks["project"], faulted_two_ranks["slowed_pid"]
    assert faulted_two_ranks["rc"] == 0, project.watch_output()
    straggling = next(i for i in project.incidents() if i["playbook"] == "rank-straggler")
    ranks = straggling["snapshot"]["trainer"]["ranks"]
    assert ranks["straggler"] == 1 and ranks["straggler_ratio"] > 1.5, ranks
    assert ranks["ranks"][1]["work_seconds"] > 1.5 * ranks["ranks"][0]["work_seconds"]
    assert any(f"rank 1 (pid {pid}) is a straggler" in n for n in straggling["notes"]), straggling["notes"]
    diagnosis = straggling["diagnosis"]
    assert diagnosis["cause"] == "slow_rank" and f"rank 1 (pid {pid})" in diagnosis["verdict"], diagnosis
    assert straggling["outcome"] == "recovered"
    assert project.final_progress() == two_rank_reference["progress"]
