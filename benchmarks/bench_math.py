"""PURE arithmetic the benchmarks report with (no processes, no files): medians and worst of repeated
samples, the hang timeout as the watcher derives it, floor ratios, where a chaos contender stopped, and
which incidents of an undisturbed run are spurious. Tested in tests/unit/test_benchmark_math.py.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from types import SimpleNamespace


# --- repeated samples --------------------------------------------------------------------------


@dataclass
class Summary:
    n: int                    # samples that had the figure
    median: float | None
    worst: float | None       # the largest (every figure reported this way is a time or a loss: larger is worse)
    of: int = 0               # samples taken (some may lack the figure)

    def text(self, spec: str = ".2f") -> str:
        """`median / worst (n)`, `-` when no sample had the figure; `(n of m)` when some lacked it."""
        if self.median is None:
            return "-" + (f" (0 of {self.of})" if self.of else "")
        count = f"{self.n}" if self.n == self.of or not self.of else f"{self.n} of {self.of}"
        return f"{format(self.median, spec)} / {format(self.worst, spec)} ({count})"


def summarize(values) -> Summary:
    """Median and worst (largest) of the samples that have a figure (None is left out, and counted in `of`)."""
    values = list(values)
    present = [float(v) for v in values if v is not None]
    if not present:
        return Summary(0, None, None, len(values))
    return Summary(len(present), statistics.median(present), max(present), len(values))


# --- the hang timeout, as the watcher derives it ------------------------------------------------


def derived_hang_timeout(longest_gap_s: float | None, watch) -> float:
    """The hang timeout the watcher would use after progress lines `longest_gap_s` apart: the very function
    the watcher calls (engine/observe/observer.py Observer.hang_timeout: min(ceiling, max(floor,
    factor x the longest gap))), given a tracker holding only that gap. `watch` has hang_timeout_s (the
    ceiling), hang_floor_s and hang_safety_factor (engine/core/config.py WatchSettings)."""
    from engine.observe.observer import Observer

    tracker = SimpleNamespace(longest_gap_s=longest_gap_s, progress_since_launch=0 if longest_gap_s is None else 1)
    return Observer.hang_timeout(SimpleNamespace(tracker=tracker), watch)


def longest_gap(times) -> float | None:
    """The longest interval between consecutive progress-line times (None with fewer than two)."""
    times = sorted(times)
    return max((b - a for a, b in zip(times, times[1:])), default=None)


# --- the chaos floor -----------------------------------------------------------------------------


def floor_ratios(reference_wall_s: float, lines, hang_marker: str = "hang timeout") -> dict:
    """From the floor's (what, seconds, source) lines: the floor beyond the reference with and without the
    line(s) naming the hang timeout, and each as a ratio (reference + floor) / reference."""
    total = sum(line[1] for line in lines)
    hang = sum(line[1] for line in lines if hang_marker in line[0])
    without = total - hang
    if not reference_wall_s:
        return {"floor_s": total, "floor_without_hang_s": without, "ratio": None, "ratio_without_hang": None}
    return {"floor_s": total, "floor_without_hang_s": without,
            "ratio": (reference_wall_s + total) / reference_wall_s,
            "ratio_without_hang": (reference_wall_s + without) / reference_wall_s}


# --- where a chaos contender stopped -------------------------------------------------------------


def stop_point(completed: bool, schedule: list[str], injected: list[str], note: str, oom: str | None,
               last_failure: str = "") -> tuple[str, str, str]:
    """(faults met, where it stopped, why) for the chaos table.

    schedule: the mid-run faults' labels in order; injected: those that were injected into this contender;
    oom: "applied" when the OOM at start applied to it, else the sentence saying why not (None: no OOM fault
    in this run); last_failure: the classification of what ended its last attempt ("disk full" names the
    tmpfs fault); note: the outcome's note (why it stopped, as the harness saw it)."""
    met = (["OOM at start"] if oom == "applied" else []) + list(injected)
    if completed:
        return (", ".join(met) or "none", "- (completed)", "met every fault of the schedule it was given")
    if last_failure == "disk full":
        where = "the disk fault (out_dir's tmpfs full)"
    elif injected:
        where = injected[-1]
    elif oom == "applied":
        where = "OOM at start"
    else:
        where = f"before the first fault ({schedule[0]})" if schedule else "before any fault"
    return (", ".join(met) or "none", where, note or "-")


# --- spurious incidents in an undisturbed run --------------------------------------------------------

OUTSIDE_CAUSES = ("contention", "steal", "throttled")
RELAUNCH_VERBS = ("stop", "resume", "rollback")


def relaunched(record: dict) -> bool:
    """The incident stopped, resumed or rolled back the trainer (an action that ran, not a skipped one), or
    recorded a relaunch."""
    ran = [a for a in record.get("actions") or [] if not a.get("skipped")]
    return (any(a.get("verb") in RELAUNCH_VERBS for a in ran) or record.get("resumed_step") is not None
            or bool(record.get("trainer_restart_seconds")))


def spurious(record: dict) -> tuple[bool, str]:
    """Whether an incident of an undisturbed run is a false alarm, and why. Every incident is, except a
    slow-training one whose diagnosis names an outside cause (contention, steal, throttled) and which took
    no relaunching action: that one told the truth about the machine and left the trainer alone."""
    playbook = record.get("playbook", "?")
    cause = (record.get("diagnosis") or {}).get("cause")
    if playbook != "slow-training":
        return True, f"{playbook} in an undisturbed run"
    if relaunched(record):
        return True, f"slow-training that relaunched the trainer (diagnosis: {cause or 'none'})"
    if cause in OUTSIDE_CAUSES:
        return False, f"slow-training, diagnosis names an outside cause ({cause}), no relaunch"
    return True, f"slow-training blamed on {cause or 'no diagnosis'}, not on an outside cause"
