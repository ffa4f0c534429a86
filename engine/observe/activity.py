"""Signs of life of a trainer in start-up or in a save: is anything in its process tree still working?

Before its first progress line a trainer preprocesses data (litdata's optimize, with spawned worker
interpreters that may print nothing for minutes), imports, builds the model, loads a checkpoint and
compiles: no progress lines, but CPU time and I/O. A tree is alive while any of its processes (the
trainer and every descendant, the workers included) gains CPU time or read/written bytes, or a new
process appears in it; a SIGSTOPped or deadlocked tree gains nothing. A save is alive while the tree
moves bytes (or prints): CPU alone does not count there, since a collective deadlocked on a GPU spins
its host thread, and the save phase lasts until the next progress line, through training steps.

Reads /proc through psutil: a few milliseconds for a small tree, and at most once per SAMPLE_INTERVAL_S.
"""

from __future__ import annotations

import psutil

SAMPLE_INTERVAL_S = 1.0


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

    def output(self, now: float) -> None:
        """The trainer wrote to its log (a whole line or a progress bar's partial one)."""
        self.last_life = max(self.last_life, now)

    def sample(self, pid: int | None, now: float, count_cpu: bool = True) -> None:
        """Compare the tree's counters with the last sample (at most once per SAMPLE_INTERVAL_S); without
        count_cpu only I/O and new processes are life."""
        if pid is None or now - self._sampled_at < SAMPLE_INTERVAL_S:
            return
        counters = tree_counters(pid)
        if pid != self._pid:          # a first sample is a baseline, not a sign of life
            self._pid = pid
        elif advanced(self._counters, counters, count_cpu):
            self.last_life = max(self.last_life, now)
        self._counters, self._sampled_at = counters, now

    def seconds_idle(self, now: float) -> float:
        return max(0.0, now - self.last_life)
