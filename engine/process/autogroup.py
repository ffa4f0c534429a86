"""The scheduler's session groups (Linux autogroup): where a process's nice value stops working.

With autogroup on (kernel.sched_autogroup_enabled = 1, the default of most distribution kernels, and of
this project's CI machine), the CFS scheduler first shares the CPU equally between *sessions*, and only
then between the processes of a session by their nice value and policy. A process started in its own
session (start_new_session, as the warm spare and the trainer are) is the only member of its group, so
its nice +10 or SCHED_IDLE changes nothing beside a trainer in another session: measured, a busy loop at
nice 10 in its own session took 92% of a core while six nice-0 watchers of another session shared the
other. The group's own nice value (/proc/PID/autogroup) is what lowers such a process's share.

Raising it is allowed to the process's owner; lowering it below 0 needs the same right as a negative nice
value, and an unprivileged change is refused (EAGAIN) if another happened on the machine in the last 100 ms.
"""

from __future__ import annotations

import errno
import time

ENABLED = "/proc/sys/kernel/sched_autogroup_enabled"


def enabled() -> bool:
    try:
        with open(ENABLED, encoding="ascii") as fh:
            return fh.read().strip() == "1"
    except OSError:
        return False


def group_nice(pid: int | str = "self") -> int | None:
    """The nice value of `pid`'s session group, or None where autogroup is off or absent."""
    if not enabled():
        return None
    try:
        with open(f"/proc/{pid}/autogroup", encoding="ascii") as fh:
            return int(fh.read().rsplit("nice", 1)[1])   # "/autogroup-4009 nice 0"
    except (OSError, IndexError, ValueError):
        return None


def set_group_nice(pid: int | str, nice: int, attempts: int = 20) -> bool:
    """Set `pid`'s session group to `nice` (clamped to -20..19); False where autogroup is off or the
    kernel refused. An EAGAIN (the machine-wide 100 ms limit on unprivileged changes) is retried."""
    if not enabled():
        return False
    for _ in range(attempts):
        try:
            with open(f"/proc/{pid}/autogroup", "w", encoding="ascii") as fh:
                fh.write(str(max(-20, min(19, nice))))
            return True
        except OSError as error:
            if error.errno != errno.EAGAIN:
                return False
            time.sleep(0.02)
    return False
