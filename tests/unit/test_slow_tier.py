"""The fast tier is decided by what a test's fixtures are, not what they are called (tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def slow_ids(*paths: str) -> set[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-m", "slow", "-p", "no:cacheprovider",
                           *paths], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 5), done.stdout + done.stderr   # 5: nothing selected
    return {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}


def test_a_module_s_own_cheap_project_fixture_keeps_its_tests_fast_and_the_shared_one_is_slow():
    replay, local_project = "tests/language/test_incidents_replay.py", "tests/unit/test_datascan.py"
    shared, synthetic_run = "tests/litgpt/test_preflight.py", "tests/unit/test_report_status.py"
    assert slow_ids(replay, local_project, shared, synthetic_run) == {shared, synthetic_run}
