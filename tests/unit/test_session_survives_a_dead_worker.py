"""A test that kills its xdist worker, or hangs, fails with a message; the session goes on and ends (issue 45).

Run as README's command runs the suite (`-n 3 --dist loadgroup`, tests/waiting_worker.py's scheduler, the hang
watchdog of tests/hang_watchdog.py) on a few tests written here: before, xdist queued the crashed test again on
each replacement worker and the session hung until CI's timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

CONFTEST = """
from tests.hang_watchdog import pytest_configure, pytest_handlecrashitem, pytest_runtest_protocol  # noqa: F401
from tests.waiting_worker import make_scheduler


def pytest_xdist_make_scheduler(config, log):
    return make_scheduler(config, log)
"""

TESTS = """
import os, signal, time
import pytest

def test_before():
    pass

@pytest.mark.xdist_group("shared")
def test_kills_its_worker():
    os.kill(os.getpid(), signal.SIGKILL)

@pytest.mark.xdist_group("shared")
def test_after_the_crash_in_the_same_unit():
    pass

def test_hangs():
    time.sleep(600)

def test_plain_{n}():
    pass
"""


@pytest.mark.slow
def test_a_killed_worker_and_a_hung_test_each_fail_once_and_the_session_ends(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_dying.py").write_text(textwrap.dedent(
        "\n".join(TESTS.replace("{n}", str(n)) if n == 0 else f"def test_plain_{n}():\n    pass\n" for n in range(6))))
    env = {**os.environ, "PYTHONPATH": str(REPO), "RUNBOOK_TEST_TIMEOUT_S": "3"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "3", "--dist", "loadgroup", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "-o", "addopts=", "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "crashed while running 'test_dying.py::test_kills_its_worker" in out, out
    assert "crashed while running 'test_dying.py::test_hangs" in out, out
    assert "Timeout (0:00:03)!" in out and "in test_hangs" in out, out   # the tracebacks say where it hung
    assert "2 failed, 8 passed" in out, out   # each failure once; the rest of the crashed unit still ran
