"""A child process's own peak memory over one piece of work, for the benchmarks' and tests' measuring children.

ru_maxrss survives exec on Linux: a child forked from a big parent (a pytest worker with torch loaded, ~345 MB)
starts with the parent's high-water mark, which hides growth below it. The kernel's VmHWM is this process's
own, and writing 5 to /proc/self/clear_refs resets it to the RSS now. Standard library only.
"""

from __future__ import annotations

from pathlib import Path


def status_kb(field: str) -> int:
    """One kB figure of /proc/self/status (VmRSS, VmHWM)."""
    return next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith(field + ":"))


def start() -> int:
    """Reset the peak to the RSS now; returns that RSS (kB): the work's growth is peak_kb() minus it."""
    Path("/proc/self/clear_refs").write_text("5")
    return status_kb("VmRSS")


def peak_kb() -> int:
    return status_kb("VmHWM")
