"""Slowness told apart by its samples: the pure verdict table, then real processes sampled from outside
(a CPU hog beside the toy trainer; a busy process under a cgroup CPU quota)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.observe.diagnosis import OtherProcess, RankSample, SlownessSamples, report, straggler, verdict
from engine.observe.slowness_sampling import sample
from tests.conftest import REPO, require_capability

HOG = "while True: pass"


def samples(**fields) -> SlownessSamples:
    base = {"cores": 2, "sample_seconds": 2.0, "trainer_cpu_percent": 60.0, "system_idle_percent": 40.0}
    return SlownessSamples(**{**base, **fields})


HOGS = [OtherProcess(pid=4242, command="python -c 'while True: pass'", cpu_percent=98.0),
        OtherProcess(pid=4243, command="make -j2", cpu_percent=60.0)]
TWO_RANKS = [RankSample(rank=0, pid=10, work_seconds=0.5), RankSample(rank=1, pid=11, work_seconds=0.5)]

VERDICTS = [
    # (sample fields, expected cause, words the sentence must carry)
    ({"stopped_fraction": 0.6}, "stopped", ["stopped from outside", "60%"]),
    ({"ranks": [TWO_RANKS[0], RankSample(rank=1, pid=11, stopped_fraction=0.7)]}, "stopped", ["rank 1 (pid 11)"]),
    ({"ranks": [TWO_RANKS[0], RankSample(rank=1, pid=11, work_seconds=1.6)]}, "slow_rank", ["rank 1 (pid 11)", "straggler", "1.60 s"]),
    ({"throttled_fraction": 0.4, "throttled_periods": 20, "cgroup": "/job", "cgroup_quota_cores": 0.5}, "throttled",
     ["/job", "0.5 cores", "40%"]),
    ({"steal_percent": 35.0}, "steal", ["steal", "35%"]),
    ({"others_cpu_percent": 158.0, "top_others": HOGS, "system_idle_percent": 2.0, "trainer_cpu_percent": 30.0},
     "contention", ["pid 4242", "pid 4243", "158%", "30%", "not a data-loading problem"]),
    ({"cpu_pressure_some_avg10": 38.1, "trainer_cpu_percent": 107.0, "others_cpu_percent": 2.0, "system_idle_percent": 39.5},
     "contention", ["outside this view", "38%", "107% of 2 cores", "in view 2%"]),
    # Pressure from the trainer's own threads while it has every core is no outside cause.
    ({"cpu_pressure_some_avg10": 38.1, "trainer_cpu_percent": 195.0, "system_idle_percent": 1.0}, "compute", ["no outside cause"]),
    ({"cpu_pressure_some_avg10": 10.0, "trainer_cpu_percent": 107.0}, "compute", ["no outside cause"]),
    ({"iowait_percent": 45.0, "data_read_mb_s": 3.0}, "storage", ["45% iowait", "3 MB/s"]),
    ({"disk_sleep_fraction": 0.5}, "storage", ["disk sleep 50%"]),
    ({"num_workers": 2, "workers_cpu_percent": 190.0}, "data_loader", ["2 workers", "190%"]),
    ({"trainer_cpu_percent": 195.0, "system_idle_percent": 1.0, "others_cpu_percent": 3.0}, "compute", ["no outside cause"]),
    ({}, "unknown", ["no single cause"]),
]


@pytest.mark.parametrize("fields, cause, words", VERDICTS, ids=[v[1] + str(i) for i, v in enumerate(VERDICTS)])
def test_verdict_table(fields, cause, words):
    found = verdict(samples(**fields))
    assert found.cause == cause, found
    for word in words:
        assert word in found.sentence, (word, found.sentence)


def test_outside_causes_win_over_advice_about_the_trainer():
    # A trainer at full CPU with workers idle, on a machine others saturate: contention, never "add workers".
    busy = samples(trainer_cpu_percent=95.0, num_workers=0, others_cpu_percent=100.0, top_others=HOGS,
                    system_idle_percent=0.0)
    assert verdict(busy).cause == "contention"
    assert "worker" not in verdict(busy).sentence.replace("more workers would only add", "")
    # Throttling and a stopped rank are named before the contention they also cause.
    assert verdict(busy.model_copy(update={"throttled_fraction": 0.5})).cause == "throttled"
    assert verdict(busy.model_copy(update={"stopped_fraction": 0.5})).cause == "stopped"


def test_straggler_needs_two_timed_ranks_and_the_factor():
    assert straggler([RankSample(rank=0, work_seconds=1.0)]) is None
    assert straggler(TWO_RANKS) is None
    slow = [*TWO_RANKS, RankSample(rank=2, pid=12, work_seconds=0.74)]
    assert straggler(slow) is None                       # 1.48 x the median: under the factor
    slow[2] = RankSample(rank=2, pid=12, work_seconds=0.8)
    assert straggler(slow)[0].rank == 2
    # 3 x the median but 14 ms over it: scheduling noise on a busy machine, not a straggler
    noise = [RankSample(rank=0, work_seconds=0.007), RankSample(rank=1, work_seconds=0.007), RankSample(rank=2, work_seconds=0.021)]
    assert straggler(noise) is None
    assert report(samples(ranks=slow))["cause"] == "slow_rank"


# --- real processes, sampled from outside ---------------------------------------------------------

def _toy_trainer(tmp_path: Path) -> subprocess.Popen:
    config = tmp_path / "toy.json"
    config.write_text(json.dumps({"out_dir": str(tmp_path / "out"), "steps": 100000, "save_interval": 100000,
                                  "step_seconds": 0.02, "seed": 1, "lr": 0.1}))
    return subprocess.Popen([sys.executable, str(REPO / "tests" / "toy_trainer" / "trainer.py"), str(config)],
                            stdout=subprocess.DEVNULL)


def _stop(*procs: subprocess.Popen) -> None:
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_cpu_hog_beside_the_trainer_is_named_as_contention(tmp_path):
    trainer = _toy_trainer(tmp_path)
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range((os.cpu_count() or 1) + 1)]
    try:
        time.sleep(0.3)
        found = sample(trainer.pid, 2.0, num_workers=0)
        assert trainer.poll() is None, "the toy trainer ended during the sample"
    finally:
        _stop(trainer, *hogs)
    result = verdict(found)
    assert result.cause == "contention", (result, found)
    named = {p.pid for p in found.top_others}
    assert named & {h.pid for h in hogs}, (named, [h.pid for h in hogs])
    assert any(HOG in p.command for p in found.top_others)
    assert f"pid {found.top_others[0].pid} `" in result.sentence   # the biggest consumer (a hog, unless the machine is busier)
    assert "more workers may help" not in result.sentence
    assert found.trainer_pids == [trainer.pid]


CGROUP_V1 = Path("/sys/fs/cgroup/cpu")   # cgroup v1's cpu controller (v1 or hybrid hosts: CI's machine)
CGROUP_V2 = Path("/sys/fs/cgroup")       # the unified hierarchy, where a cgroup-v2-only host has its cpu controller


def _quota_cgroup(name: str) -> tuple[Path, str]:
    """A cgroup holding its processes to 0.2 cores, and which cgroup version it is: v1 where the host has
    v1's cpu controller, v2 on a cgroup-v2-only host; the diagnosis reads either."""
    if os.geteuid() != 0:
        require_capability("a cgroup with a CPU quota needs root")
    if (CGROUP_V1 / "cpu.cfs_quota_us").exists():
        folder = CGROUP_V1 / name
        try:
            folder.mkdir(exist_ok=True)
            (folder / "cpu.cfs_period_us").write_text("100000")
            (folder / "cpu.cfs_quota_us").write_text("20000")     # 0.2 cores
        except OSError as error:
            require_capability(f"cgroup v1's cpu controller at {CGROUP_V1} is not writable: {error}")
        return folder, "v1"
    controllers = CGROUP_V2 / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        folder = CGROUP_V2 / name
        try:
            control = CGROUP_V2 / "cgroup.subtree_control"
            if "cpu" not in control.read_text().split():
                control.write_text("+cpu")
            folder.mkdir(exist_ok=True)
            (folder / "cpu.max").write_text("20000 100000")      # 0.2 cores
        except OSError as error:
            require_capability(f"cgroup v2's cpu controller at {CGROUP_V2} is not writable: {error}")
        return folder, "v2"
    require_capability(f"no cgroup cpu controller: neither v1's at {CGROUP_V1} nor v2's in {controllers}")


def test_a_trainer_over_its_cgroup_quota_is_throttled_not_contended(tmp_path):
    from engine.observe.slowness_sampling import _cgroup_of

    name = f"runbook-test-{os.getpid()}"
    folder, version = _quota_cgroup(name)
    busy = subprocess.Popen([sys.executable, "-c", HOG])
    try:
        (folder / "cgroup.procs").write_text(str(busy.pid))
        time.sleep(0.3)
        path, read_from, read_as = _cgroup_of(busy.pid)
        found = sample(busy.pid, 1.5)
    finally:
        _stop(busy)
        time.sleep(0.1)
        folder.rmdir()
    if version == "v1":   # read from v1's cpu controller (cpu.cfs_quota_us, cpu.stat throttled_time)
        assert read_as == "v1" and read_from.resolve() == folder.resolve(), (read_as, read_from)   # cpu may link to cpu,cpuacct
    else:                 # read from the unified hierarchy (cpu.max, cpu.stat throttled_usec)
        assert read_as == "v2" and read_from == folder, (read_as, read_from)
    assert path is not None and path.endswith(name) and found.cgroup == path
    result = verdict(found)
    assert result.cause == "throttled", (result, found)
    assert found.cgroup_quota_cores == pytest.approx(0.2)
    assert found.throttled_periods and found.throttled_periods > 5
    assert found.trainer_cpu_percent < 40    # held to about 0.2 cores
