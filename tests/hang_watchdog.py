"""A test that runs past its limit ends its process, with every thread's traceback, instead of hanging the session.

`faulthandler.dump_traceback_later(exit=True)` is armed around each test (setup, call and teardown): past
RUNBOOK_TEST_TIMEOUT_S seconds (default 900: the longest test, SLURM's first install included, takes a fraction)
it writes the tracebacks and exits the process. Under xdist that is a dead worker, which tests/waiting_worker.py
turns into one failed test ("worker 'gw0' crashed while running ...") and a replacement; the tracebacks, written
to a file per worker (an xdist worker's stderr reaches no one), are added to that failure's report. Without
xdist they go to stderr and the session stops. Either way CI says which test hung and where, where a hang used
to show only as CI's 90-minute timeout.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import tempfile
from pathlib import Path

import pytest

DEFAULT_LIMIT_S = 900.0
DUMPS = "RUNBOOK_TEST_DUMPS"   # the folder of the workers' traceback files, made by the controller
_dump_file = None


def limit_s() -> float:
    return float(os.environ.get("RUNBOOK_TEST_TIMEOUT_S", DEFAULT_LIMIT_S))


def _dump_path(worker: str) -> Path | None:
    folder = os.environ.get(DUMPS)
    return Path(folder) / f"{worker}.txt" if folder else None


def _dump_target():
    """This worker's traceback file (opened once, emptied before each test), or stderr outside xdist."""
    global _dump_file
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    path = _dump_path(worker) if worker else None
    if path is None:
        return sys.stderr
    if _dump_file is None:
        _dump_file = open(path, "w")   # noqa: SIM115 - kept open for faulthandler, for the worker's life
    _dump_file.seek(0)
    _dump_file.truncate()
    _dump_file.flush()
    return _dump_file


def pytest_configure(config):
    """(Hooks below: tests/conftest.py imports them.) The controller makes the dump folder before any worker
    starts, so each worker inherits where to write."""
    if not hasattr(config, "workerinput") and DUMPS not in os.environ:
        os.environ[DUMPS] = tempfile.mkdtemp(prefix="runbook-test-dumps-")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """The watchdog armed for the test's setup, call and teardown."""
    target = _dump_target()
    sys.stderr.flush()   # faulthandler writes to the file descriptor directly: what is buffered goes first
    faulthandler.dump_traceback_later(limit_s(), exit=True, file=target)
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_handlecrashitem(crashitem, report, sched):
    """On the controller: the crashed worker's tracebacks, if its watchdog wrote any, join the failure's report."""
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", None)
    path = _dump_path(worker) if worker else None
    dumped = path.read_text(errors="replace").strip() if path is not None and path.is_file() else ""
    if dumped:
        report.longrepr = f"{report.longrepr}\nthe test ran past RUNBOOK_TEST_TIMEOUT_S={limit_s():g} s " \
                          f"(tests/hang_watchdog.py); where each thread was:\n{dumped}"
