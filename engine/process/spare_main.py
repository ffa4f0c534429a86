"""A warm spare trainer interpreter: import the trainer's heavy modules now, wait, then become a launch.

    python -m engine.process.spare_main SPARE_DIR WATCHER_PID MODULE...

After the imports it writes SPARE_DIR/ready and polls for SPARE_DIR/go.json (every 10 ms: a stat),
which names the launch's argv (`python -m PACKAGE.MODULE ARG...`), environment, cwd and log file. It
then points stdout/stderr at that log, takes that environment and runs the module as `__main__`
(runpy, so `if __name__ == "__main__":` guards and Fabric's re-run of `python -m <module>` for other
ranks behave as in a cold launch). It never forks: the spare itself becomes the trainer, so the
"fork after threads" hazard of a forking zygote does not arise. If the watcher that made it is gone,
it exits. See engine/process/warm_spare.py for the watcher's side.

While it waits it runs under SCHED_IDLE at nice +10 when it can come back to its own policy and
priority on the go (root, or RLIMIT_NICE allows it; both are per thread in Linux, so every thread is
restored): its imports then take only the CPU a starting or training trainer leaves idle. Nice +10
alone still took ~10% of a core from a trainer using both cores of a small machine, and torch's
threads wait for their slowest member at each parallel region, so training slowed by far more.
The spare is alone in its session, so its session's group (autogroup) is niced too: with autogroup on,
the CPU is shared between sessions first, and a spare's own nice and SCHED_IDLE counted for nothing
beside a trainer in another session (engine/process/autogroup.py).
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import time

from engine.process import autogroup

WAIT_NICE = 10


def can_restore_priority(current: int) -> bool:
    """An unprivileged process may lower its nice value only down to 20 - RLIMIT_NICE."""
    import resource

    if os.geteuid() == 0:
        return True
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    return soft == resource.RLIM_INFINITY or 20 - soft <= current


def wait_in_background(priority: int) -> None:
    """The spare's waiting class: SCHED_IDLE (runs only on a CPU nothing else wants) at nice +10, and its
    session's group at nice +10 too: the spare is alone in its session, and with autogroup on the CPU is
    shared between sessions before nice or SCHED_IDLE count (engine/process/autogroup.py)."""
    os.setpriority(os.PRIO_PROCESS, 0, min(19, priority + WAIT_NICE))
    autogroup.set_group_nice("self", priority + WAIT_NICE)
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        pass   # not Linux: nice alone


def restore_all_threads(pid: int, priority: int) -> None:
    """Every thread of `pid` back to SCHED_OTHER at `priority` (the imports may have started threads,
    which inherited the waiting class), and its session's group back to `priority`. Also used by the
    watcher to hurry a spare a launch waits for."""
    autogroup.set_group_nice(pid, priority)
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for tid in tids:
        try:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        except (AttributeError, OSError):
            pass
        try:
            os.setpriority(os.PRIO_PROCESS, tid, priority)
        except OSError:
            pass


def apply_late_environment() -> None:
    """What the imports read from variables that may differ between spare and launch (warm_spare.LATE_ENV_PREFIXES)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available():
        dist.set_debug_level_from_env()   # TORCH_DISTRIBUTED_DEBUG, read by torch at import


def main(argv: list[str]) -> int:
    spare_dir, watcher_pid, modules = argv[0], int(argv[1]), argv[2:]
    priority = os.getpriority(os.PRIO_PROCESS, 0)
    niced = can_restore_priority(priority)
    if niced:
        wait_in_background(priority)
    for name in modules:
        importlib.import_module(name)
    import_cpu_s = time.process_time()   # what the imports cost, said in the launch's log (benchmarks add it up)
    ready = os.path.join(spare_dir, "ready")
    with open(ready + ".part", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(ready + ".part", ready)
    go_path = os.path.join(spare_dir, "go.json")
    checked = time.monotonic()
    while not os.path.exists(go_path):
        time.sleep(0.01)
        if time.monotonic() - checked > 1.0:
            checked = time.monotonic()
            try:
                os.kill(watcher_pid, 0)
            except ProcessLookupError:
                return 0   # nobody will ever use this spare
    if niced:
        restore_all_threads(os.getpid(), priority)
    with open(go_path, encoding="utf-8") as fh:
        go = json.load(fh)
    log = os.open(go["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.environ.clear()
    os.environ.update(go["env"])
    apply_late_environment()
    os.chdir(go["cwd"])
    command = go["argv"]   # [python, "-m", module, *args]
    print(f"runbook: warm spare pid {os.getpid()} (imports done {go['waited_s']:.1f} s ago, {import_cpu_s:.1f} CPU s) "
          f"runs {' '.join(command[2:4])}",
          flush=True)
    sys.argv = [command[2], *command[3:]]
    runpy.run_module(command[2], run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
