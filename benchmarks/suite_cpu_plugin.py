"""A pytest plugin for benchmarks/bench_suite_cpu.py: the CPU each test costs, with every process it started.

    python -m pytest -p benchmarks.suite_cpu_plugin ...     # with RUNBOOK_SUITE_CPU_DIR=FOLDER

Why not the test's own clock: a test's wall time under xdist is mostly the other worker's load and its
own waits (hang timeouts, pacing), and most of its CPU is spent in the processes it starts (watchers,
launchers, trainers, torchrun agents), which exit as grandchildren that getrusage(RUSAGE_CHILDREN) never
sees. So each worker moves itself into a cgroup v1 cpuacct group of its own, which every descendant
inherits, and a test's CPU is that group's usage over the test (module fixtures count in the first test
that uses them). Without a writable cpuacct controller (not root, cgroup v2 only) it falls back to
RUSAGE_SELF + RUSAGE_CHILDREN, and each row says which clock it used.

One JSON line per test to FOLDER/cpu-<worker>.jsonl: {"id", "cpu_s", "wall_s", "clock", "group"}; the group is
removed when the worker ends.
"""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

import pytest

CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class Clock:
    def __init__(self, worker: str):
        self.group: Path | None = None
        group = CPUACCT / f"runbook-suite-cpu-{os.getpid()}-{worker}"
        try:
            group.mkdir(exist_ok=True)
            (group / "cgroup.procs").write_text(str(os.getpid()))
            self.group = group
        except OSError:
            self.group = None   # not root, or no cgroup v1 cpuacct: the reaped-children clock
        self.name = "cgroup cpuacct" if self.group else "getrusage (reaped children only)"

    def read(self) -> float:
        if self.group is not None:
            return int((self.group / "cpuacct.usage").read_text()) / 1e9
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    def close(self) -> None:
        if self.group is None:
            return
        try:   # back to the parent group, then the (now empty of us) group goes; a leftover process keeps it
            (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
            self.group.rmdir()
        except OSError:
            pass


_STATE: dict = {}


def pytest_configure(config):
    folder = os.environ.get("RUNBOOK_SUITE_CPU_DIR")
    if not folder or getattr(config, "workerinput", None) is None and config.getoption("numprocesses", None):
        return   # xdist's controller runs no test; its workers record
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(folder).mkdir(parents=True, exist_ok=True)
    _STATE["clock"] = Clock(worker)
    _STATE["out"] = open(Path(folder) / f"cpu-{worker}.jsonl", "a")


def pytest_unconfigure(config):
    if "clock" in _STATE:
        _STATE.pop("out").close()
        _STATE.pop("clock").close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    clock = _STATE.get("clock")
    if clock is None:
        yield
        return
    cpu, wall = clock.read(), time.monotonic()
    yield
    row = {"id": item.nodeid, "cpu_s": round(clock.read() - cpu, 3), "wall_s": round(time.monotonic() - wall, 3),
           "clock": clock.name, "group": str(clock.group or "")}
    _STATE["out"].write(json.dumps(row) + "\n")
    _STATE["out"].flush()
