"""A warm spare trainer interpreter: import the trainer's heavy modules now, wait, then become a launch.

    python -m engine.spare_main SPARE_DIR WATCHER_PID MODULE...

After the imports it writes SPARE_DIR/ready and polls for SPARE_DIR/go.json (every 10 ms: a stat),
which names the launch's argv (`python -m PACKAGE.MODULE ARG...`), environment, cwd and log file. It
then points stdout/stderr at that log, takes that environment and runs the module as `__main__`
(runpy, so `if __name__ == "__main__":` guards and Fabric's re-run of `python -m <module>` for other
ranks behave as in a cold launch). It never forks: the spare itself becomes the trainer, so the
"fork after threads" hazard of a forking zygote does not arise. If the watcher that made it is gone,
it exits. See engine/warm_spare.py for the watcher's side.

While it waits it runs at nice +10 when it can come back to its own priority on the go (root, or
RLIMIT_NICE allows it; Linux niceness is per thread, so every thread is restored): its imports then
take the CPU a starting or training trainer leaves idle, and the trainer it becomes is not slowed.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import time


WAIT_NICE = 10


def can_restore_priority(current: int) -> bool:
    """An unprivileged process may lower its nice value only down to 20 - RLIMIT_NICE."""
    import resource

    if os.geteuid() == 0:
        return True
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    return soft == resource.RLIM_INFINITY or 20 - soft <= current


def set_priority_all_threads(value: int) -> None:
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else [str(os.getpid())]:
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), value)
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
        os.setpriority(os.PRIO_PROCESS, 0, min(19, priority + WAIT_NICE))
    for name in modules:
        importlib.import_module(name)
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
        set_priority_all_threads(priority)
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
    print(f"runbook: warm spare pid {os.getpid()} (imports done {go['waited_s']:.1f} s ago) runs {' '.join(command[2:4])}",
          flush=True)
    sys.argv = [command[2], *command[3:]]
    runpy.run_module(command[2], run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
