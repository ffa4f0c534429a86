"""Several ranks supervised rank by rank: the pure rank model, then real 2-rank litgpt training (DDP over
gloo on the CPU) broken from outside one rank at a time, each fault recovered by its playbook to the budget's
exact step and micro-batch counts (an undisturbed 2-rank run's: no second run is trained to say them; the
undisturbed one, with no incident, is tests/cluster/test_slurm_ranks.py's).

One of the faults is a notice to one rank (engine/trainers/litgpt/notice_save.py): a notice that reaches rank 1
alone (SIGUSR1, the scheduler's early notice) is agreed by both ranks at the next optimizer-step boundary (an
all_reduce of the flag), the step is saved once, both ranks exit 75, and the preemption playbook resumes."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import psutil
import pytest

from engine.process.ranks import RankExit, RankHeartbeat, RankWatch, exit_path, heartbeat_path, ranks_status, read_folder, write_record
from engine.trainers.litgpt.notice_save import NOTICE_EXIT_CODE
from engine.trainers.litgpt.resume import read_progress
from tests.conftest import SHORT_RUN, make_project, require_capability, stop_process, wait_for

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
# SHORT_RUN's 40 960 tokens: 40 optimizer steps, each 2 ranks x 2 micro-batches x 4 sequences x 64 tokens;
# scheduled saves every 10 steps (the notice's step, 12 or 13, is none of them)
STEPS, SAVE_INTERVAL = 40, SHORT_RUN["save_interval"]
BUDGET = {"step_count": STEPS, "iter_num": 2 * STEPS}
PROGRESS_STEP = re.compile(r"^Epoch \d+ \| iter (\d+) step (\d+) \|", re.M)


def launch_ranks(project, launch: int) -> Path:
    return project.run_dir / "launches" / f"launch-{launch:03d}" / "ranks"


def heartbeat(project, launch: int, rank: int) -> RankHeartbeat | None:
    beats, _ = read_folder(launch_ranks(project, launch))
    return beats.get(rank)


def test_two_ranks_train_with_ddp_over_gloo_and_each_rank_beats(faulted_two_ranks):
    """Read on the faulted run: every launch is a real 2-rank DDP group, and its last one trains to the end."""
    project = faulted_two_ranks["project"]
    assert faulted_two_ranks["rc"] == 0, project.watch_output()
    log = (project.run_dir / "logs" / "trainer-001.log").read_text()
    assert "distributed_backend=gloo" in log and "GLOBAL_RANK: 1, MEMBER: 2/2" in log
    last = max(int(p.name.split("-")[1]) for p in (project.run_dir / "launches").glob("launch-*"))
    beats, _ = read_folder(launch_ranks(project, last))
    assert sorted(beats) == [0, 1] and {b.world_size for b in beats.values()} == {2}
    assert beats[0].pid != beats[1].pid and beats[0].step == beats[1].step == STEPS
    assert all(b.work_seconds and b.work_seconds > 0 for b in beats.values())
    # tokens: iter_num counts one rank's micro-batches; 2 ranks x 4 sequences x 64 tokens each
    assert project.final_progress() == BUDGET and BUDGET["iter_num"] * 2 * 4 * 64 == SHORT_RUN["max_tokens"]


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
def faulted_two_ranks(tmp_path_factory, shared_data) -> dict:
    """One run, four faults on rank 1, one per launch: SIGKILL after checkpoint 10, SIGSTOP in the
    relaunch, a notice to rank 1 alone in the next one, a CPU quota of 0.05 cores in the one after."""
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

        # Rank 1 is stopped past step 12, given the notice, and continued: the flag is its own until the
        # next boundary's all_reduce, so rank 0 saves only if the agreement works.
        wait_for(lambda: _past(project, 3, 1, 12), 240, interval=0.01, what="rank 1 of launch 3 past step 12")
        found["noticed_pid"] = heartbeat(project, 3, 1).pid
        os.kill(found["noticed_pid"], signal.SIGSTOP)
        time.sleep(0.1)
        found["noticed_at_step"] = heartbeat(project, 3, 1).step
        os.kill(found["noticed_pid"], signal.SIGUSR1)
        os.kill(found["noticed_pid"], signal.SIGCONT)

        wait_for(lambda: _past(project, 4, 1, found["noticed_at_step"] + 2), 240, interval=0.02,
                 what="rank 1 of launch 4 two steps past the notice")
        found["slowed_pid"] = heartbeat(project, 4, 1).pid
        found["quota_skipped"] = CpuQuota.unavailable()
        if found["quota_skipped"] is None:
            with CpuQuota(found["slowed_pid"]):
                wait_for(lambda: any(i["playbook"] == "rank-straggler" for i in project.incidents()), 120,
                         what="a rank-straggler incident")
                time.sleep(3)   # the diagnosis samples the slowed rank
        found["rc"] = watcher.wait(timeout=400)
    finally:
        stop_process(watcher)
        if found.get("noticed_pid"):
            try:
                os.kill(found["noticed_pid"], signal.SIGCONT)   # never leave a stopped rank behind
            except ProcessLookupError:
                pass
    return found


def test_a_killed_rank_is_one_incident_naming_it_and_the_group_resumes(faulted_two_ranks):
    project = faulted_two_ranks["project"]
    assert faulted_two_ranks["rc"] == 0, project.watch_output()
    incidents = project.incidents()
    playbooks = [i["playbook"] for i in incidents]
    if faulted_two_ranks["quota_skipped"]:   # no CPU quota was put on launch 4's rank 1: nothing slowed it
        assert playbooks == ["rank-died", "rank-hang", "preemption"], (faulted_two_ranks["quota_skipped"], playbooks)
    else:                                    # the quota (CI's machine): the fourth launch's straggler is the fourth incident
        assert playbooks == ["rank-died", "rank-hang", "preemption", "rank-straggler"], playbooks
    died = incidents[0]
    ranks = died["snapshot"]["trainer"]["ranks"]
    assert ranks["world_size"] == 2 and ranks["first_failed"] == 1 and ranks["first_failed_signal"] == "SIGKILL"
    assert ranks["ranks"][1]["signal"] == "SIGKILL" and ranks["ranks"][1]["pid"] == faulted_two_ranks["killed_pid"]
    assert any(f"rank 1 (pid {faulted_two_ranks['killed_pid']}) died first (SIGKILL)" in n for n in died["notes"]), died["notes"]
    assert died["outcome"] == "recovered"
    assert project.final_progress() == BUDGET


def test_a_stopped_rank_is_named_as_the_hang_and_the_whole_group_is_replaced(faulted_two_ranks):
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
    assert '"TORCH_DISTRIBUTED_DEBUG": "INFO"' in journal   # the diagnosis; DETAIL never on a CPU (gloo's SIGSEGV)
    assert project.final_progress() == BUDGET



def test_a_rank_held_to_a_cpu_quota_is_named_as_the_straggler(faulted_two_ranks):
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
    assert project.final_progress() == BUDGET


def test_a_notice_to_one_rank_is_agreed_saved_once_and_every_rank_exits_75(faulted_two_ranks):
    project, stopped_at = faulted_two_ranks["project"], faulted_two_ranks["noticed_at_step"]
    assert faulted_two_ranks["rc"] == 0, project.watch_output()
    assert stopped_at % SAVE_INTERVAL < SAVE_INTERVAL - 1, "the run outran the test: the notice met a scheduled save"
    launch3 = project.run_dir / "launches" / "launch-003"
    status = json.loads((launch3 / "exit-status.json").read_text())
    assert status["exit_code"] == NOTICE_EXIT_CODE, status   # rank 0, which never got a signal itself
    _, exits = read_folder(launch3 / "ranks")
    assert exits[1].exit_code == NOTICE_EXIT_CODE, exits     # rank 1 saved with it, then exited 75

    log3 = (project.run_dir / "logs" / "trainer-003.log").read_text()
    saved = [int(s) for s in re.findall(r"runbook: notice save of step (\d+) complete", log3)]
    assert len(saved) == 1, log3[-3000:]                      # one save, announced once (rank 0)
    step = saved[0]
    assert step in (stopped_at, stopped_at + 1), (step, stopped_at)
    assert "runbook: SIGUSR1 received" in log3
    # Both ranks stopped at the same step boundary: the saved state is that step, and each rank's last
    # heartbeat (written in the step's last micro-batch, before the step count moved on) is at its iter_num.
    assert read_progress(project.step_dir(step) / "lit_model.pth") == {"step_count": step, "iter_num": 2 * step}
    beats, _ = read_folder(launch3 / "ranks")
    assert beats[0].iter_num == beats[1].iter_num == 2 * step, (beats[0], beats[1])
    assert max(int(s) for _, s in PROGRESS_STEP.findall(log3)) == step
    assert not list(project.out_dir.rglob("notice-save-*")) and not list(project.out_dir.rglob("*.staging"))


def test_the_group_resumes_from_the_notice_save_to_the_budget_with_no_step_lost(faulted_two_ranks):
    project = faulted_two_ranks["project"]
    assert faulted_two_ranks["rc"] == 0, project.watch_output()
    notice = next(i for i in project.incidents() if i["playbook"] == "preemption")
    step = notice["resumed_step"]
    assert notice["outcome"] == "recovered" and notice["steps_lost"] == 0, notice
    log4 = (project.run_dir / "logs" / "trainer-004.log").read_text()
    assert f"Resuming training from {project.step_dir(step) / 'lit_model.pth'}" in log4
    resumed = [(int(i), int(s)) for i, s in PROGRESS_STEP.findall(log4)]
    assert resumed[0] == (2 * step + 2, step + 1), resumed[:3]   # the next step, nothing computed twice
    assert project.final_progress() == BUDGET                     # as an undisturbed run


def test_a_record_the_listing_missed_is_opened_by_name(tmp_path, monkeypatch):
    """A heartbeat is renamed over at every micro-batch; at CI one read of the folder lacked rank-0.json while
    the file was there. Here the listing drops it for real (pathlib's glob filtered), and the read still finds it."""
    for rank in (0, 1, 2):
        write_record(heartbeat_path(tmp_path, rank), RankHeartbeat(rank=rank, world_size=4, pid=100 + rank, started=1.0,
                                                                   step=3, iter_num=6, time=NOW))
    write_record(exit_path(tmp_path, 0), RankExit(rank=0, pid=100, exit_code=1, ended=NOW))
    listed = Path.glob
    monkeypatch.setattr(Path, "glob", lambda self, pattern: [p for p in listed(self, pattern)
                                                             if p.name not in ("rank-0.json", "rank-2.json", "rank-0.exit.json")])
    beats, exits = read_folder(tmp_path)
    assert sorted(beats) == [0, 1, 2] and sorted(exits) == [0]
    assert 3 not in beats   # the world of 4 is looked for by name; rank 3 wrote nothing: none is made up
