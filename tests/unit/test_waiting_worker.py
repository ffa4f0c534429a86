"""tests/waiting_worker.py: with three workers, the tests of the `waits` group run on the last worker alone and
every other test on the first two; with two, loadgroup as before. A real pytest-xdist run of a generated suite
(each test writes which worker ran it), with the scheduler loaded as conftest.py loads it."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

SUITE = '''
import json, os, pytest
from pathlib import Path

def ran(name):
    Path(os.environ["RAN_DIR"], name).write_text(os.environ.get("PYTEST_XDIST_WORKER", "main"))

@pytest.mark.parametrize("n", range(6))
@pytest.mark.xdist_group("waits")
def test_waits(n):
    ran(f"waits-{n}")

@pytest.mark.parametrize("n", range(12))
def test_cpu(n):
    ran(f"cpu-{n}")

@pytest.mark.xdist_group("file")
@pytest.mark.parametrize("n", range(3))
def test_grouped(n):
    ran(f"grouped-{n}")
'''
CONFTEST = '''
import pytest

@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from tests.waiting_worker import make_scheduler
    return make_scheduler(config, log)
'''


def run_suite(tmp_path, workers: int) -> dict[str, str]:
    folder = tmp_path / f"suite-{workers}"
    ran = folder / "ran"
    ran.mkdir(parents=True)
    (folder / "test_generated.py").write_text(SUITE)
    (folder / "conftest.py").write_text(CONFTEST)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-n",
                           str(workers), "--dist", "loadgroup", "test_generated.py"], cwd=folder, capture_output=True,
                          text=True, timeout=300, env={"RAN_DIR": str(ran), "PYTHONPATH": str(REPO),
                                                       "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "21 passed" in done.stdout, done.stdout
    return {path.name: path.read_text() for path in ran.iterdir()}


def workers_of(ran: dict[str, str], prefix: str) -> set[str]:
    return {worker for name, worker in ran.items() if name.startswith(prefix)}


def test_three_workers_keep_the_last_for_the_waits_group_alone(tmp_path):
    ran = run_suite(tmp_path, 3)
    assert len(ran) == 21, json.dumps(ran)
    assert workers_of(ran, "waits-") == {"gw2"}, ran
    assert workers_of(ran, "cpu-") | workers_of(ran, "grouped-") <= {"gw0", "gw1"}, ran
    assert len(workers_of(ran, "grouped-")) == 1, ran    # a group stays on one worker


def test_two_workers_are_loadgroup_unchanged(tmp_path):
    ran = run_suite(tmp_path, 2)
    assert len(ran) == 21 and set(ran.values()) <= {"gw0", "gw1"}, ran
    assert len(workers_of(ran, "waits-")) == 1 and len(workers_of(ran, "grouped-")) == 1, ran
