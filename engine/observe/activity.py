"""Signs of life of a trainer in start-up or in a save: is anything in its process tree still working?

Before its first progress line a trainer preprocesses data (litdata's optimize, with spawned worker
interpreters that may print nothing for minutes), imports, builds the model, loads a checkpoint and
compiles: no progress lines, but CPU time and I/O. A tree is alive while any of its processes (the
trainer and every descendant, the workers included) gains CPU time or read/written bytes, or a new
process appears in it; a SIGSTOPped or deadlocked tree gains nothing. A save is alive while the tree
moves bytes (or prints): CPU alone does not count there, since a collective deadlocked on a GPU spins
its host thread, and the save phase lasts until the next progress line, through training steps.

CPU time is life only in bulk: at least ``min_cpu_s`` CPU-seconds over the last ``cpu_window_s``
(watch.cpu_life_min_s, watch.cpu_life_window_s). A deadlocked tree still ticks: litgpt's data loader
whose workers died (`AF_UNIX path too long`) polls its queues, 0.01 CPU-s per 30 s measured, and when
any tick was life only watch.startup_timeout_s (4 h) caught it. A real start-up's work (tokenizing,
building, loading, compiling) uses a core or more; a download moves bytes.

Reads /proc through psutil: a few milliseconds for a small tree, and at most once per SAMPLE_INTERVAL_S.
"""

from __future__ import annotations

from collections import deque

import psutil

SAMPLE_INTERVAL_S = 1.0
CPU_WINDOW_S = 180.0   # the defaults of watch.cpu_life_window_s and watch.cpu_life_min_s (engine/core/settings.py)
MIN_CPU_S = 1.0


def tree_counters(pid: int) -> dict[tuple[int, float], tuple[float, int]]:
    """(pid, start time) -> (CPU seconds, I/O bytes) of the process and its descendants; {} when it is gone.

    The CPU seconds include each process's reaped children (a worker that already ended counts in its
    parent); I/O is read + written characters (every read/write call: files, pipes and sockets, the page
    cache included), 0 where the kernel does not tell."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return {}
    counters = {}
    for proc in processes:
        try:
            with proc.oneshot():
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                cpu = proc.cpu_times()
                seconds = cpu.user + cpu.system + getattr(cpu, "children_user", 0.0) + getattr(cpu, "children_system", 0.0)
                try:
                    io = proc.io_counters()
                    moved = getattr(io, "read_chars", io.read_bytes) + getattr(io, "write_chars", io.write_bytes)
                except (psutil.Error, AttributeError, NotImplementedError):
                    moved = 0
                counters[(proc.pid, proc.create_time())] = (seconds, moved)
        except psutil.Error:   # it ended between the listing and the read: its parent counts it now
            continue
    return counters


def advanced(before: dict, after: dict, count_cpu: bool = True) -> bool:
    """PURE. Did the tree work between two samples: a new process, or any process with more I/O (or CPU,
    with count_cpu)?"""
    for key, (cpu, moved) in after.items():
        old = before.get(key)
        if old is None or (count_cpu and cpu > old[0]) or moved > old[1]:
            return True
    return False


def cpu_gained(before: dict, after: dict) -> float:
    """PURE. CPU-seconds the tree's processes present in both samples gained (an ended one is not a loss)."""
    return sum(max(0.0, cpu - before[key][0]) for key, (cpu, _moved) in after.items() if key in before)


def busy_enough(history: deque, now: float, window_s: float, min_cpu_s: float) -> bool:
    """history: (time, CPU-seconds so far) samples, oldest first, the newest at `now`; trimmed here to the
    window. At least min_cpu_s gained over the last window_s; over a shorter history, the same rate (a
    young start-up)."""
    while len(history) > 1 and history[1][0] <= now - window_s:
        history.popleft()   # keep one sample at or before the window's start
    (then, cpu_then), (_, cpu_now) = history[0], history[-1]
    span = now - then
    return span > 0 and cpu_now - cpu_then >= min_cpu_s * min(1.0, span / window_s)


class StartupActivity:
    """When the trainer of the current launch last showed life: output, or its process tree working."""

    def __init__(self, now: float):
        self.reset(now)

    def reset(self, now: float) -> None:
        """A new launch (or a re-attached one): its start is its last sign of life so far."""
        self.last_life = now
        self._pid: int | None = None
        self._counters: dict = {}
        self._sampled_at = float("-inf")
        self._cpu_total = 0.0
        self._cpu_history: deque[tuple[float, float]] = deque()

    def output(self, now: float) -> None:
        """The trainer wrote to its log (a whole line or a progress bar's partial one)."""
        self.last_life = max(self.last_life, now)

    def sample(self, pid: int | None, now: float, count_cpu: bool = True, cpu_window_s: float = CPU_WINDOW_S,
               min_cpu_s: float = MIN_CPU_S) -> None:
        """Compare the tree's counters with the last sample (at most once per SAMPLE_INTERVAL_S): a new
        process or I/O is life; CPU is life (with count_cpu) only when the tree gained at least min_cpu_s
        over the last cpu_window_s."""
        if pid is None or now - self._sampled_at < SAMPLE_INTERVAL_S:
            return
        counters = tree_counters(pid)
        if pid != self._pid:          # a first sample is a baseline, not a sign of life
            self._pid = pid
            self._cpu_history = deque([(now, self._cpu_total)])
        else:
            self._cpu_total += cpu_gained(self._counters, counters)
            self._cpu_history.append((now, self._cpu_total))
            busy = count_cpu and busy_enough(self._cpu_history, now, cpu_window_s, min_cpu_s)
            if busy or advanced(self._counters, counters, count_cpu=False):
                self.last_life = max(self.last_life, now)
        self._counters, self._sampled_at = counters, now

    def seconds_idle(self, now: float) -> float:
        return max(0.0, now - self.last_life)
