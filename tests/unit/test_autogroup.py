"""engine/process/autogroup.py: a process alone in its session is niced through its session's group."""

from __future__ import annotations

import subprocess
import sys
import time

from engine.process import autogroup


def sleeper(preexec=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True,
                            preexec_fn=preexec)


def test_a_new_sessions_group_is_niced_and_back_or_none_where_autogroup_is_off():
    child = sleeper(lambda: autogroup.set_group_nice("self", 10))
    try:
        time.sleep(0.3)
        if not autogroup.enabled():
            assert autogroup.group_nice(child.pid) is None and autogroup.set_group_nice(child.pid, 5) is False
            return
        assert autogroup.group_nice(child.pid) == 10            # set from inside, as the spare does
        assert autogroup.set_group_nice(child.pid, 0) is True    # back, as restore_all_threads does (from outside)
        assert autogroup.group_nice(child.pid) == 0
        assert autogroup.set_group_nice(child.pid, 99) and autogroup.group_nice(child.pid) == 19   # clamped
    finally:
        child.kill()
        child.wait()


def test_a_gone_process_is_not_an_error():
    child = sleeper()
    child.kill()
    child.wait()
    assert autogroup.group_nice(child.pid) is None
    assert autogroup.set_group_nice(child.pid, 10) is False
