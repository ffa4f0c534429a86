"""Advice computed from what the run has shown, not from rules of thumb."""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from engine.core.config import RunConfig
    from engine.observe.observer import MetricTracker


# The run's playbook history and journal (engine/records, beside this floor), as the advice reads them.
class FiredHistory(Protocol):
    def all_fired(self) -> list[float]: ...


class JournalEntries(Protocol):
    @property
    def path(self) -> Path: ...
    def entries(self) -> list[dict]: ...


def young_daly_interval_s(save_cost_s: float, mtbf_s: float) -> float:
    """The checkpoint interval that minimises expected lost compute: sqrt(2 x save cost x MTBF)."""
    return math.sqrt(2.0 * save_cost_s * mtbf_s)


def save_interval_advice(save_cost_s: float | None, mtbf_s: float | None, step_time_s: float | None,
                         save_interval: int, tolerance: float = 2.0) -> str | None:
    """A sentence when the configured save_interval is more than `tolerance` x off the optimum; else None."""
    if not save_cost_s or not mtbf_s or not step_time_s:
        return None
    best_steps = max(1, round(young_daly_interval_s(save_cost_s, mtbf_s) / step_time_s))
    if best_steps / tolerance <= save_interval <= best_steps * tolerance:
        return None
    return (f"save_interval {save_interval} is far from the Young-Daly optimum of ~{best_steps} steps "
            f"(save cost {save_cost_s:.2f} s, mean time between failures {mtbf_s:.0f} s, {step_time_s:.3f} s/step)")


def run_save_interval_advice(tracker: MetricTracker, history: FiredHistory, journal: JournalEntries,
                             config: RunConfig) -> str | None:
    """save_interval_advice from what this run has shown: its save cost and step time (the log), and
    its mean time between failures (the journal's first entry and the playbooks fired since)."""
    save_cost = statistics.median(tracker.save_seconds) if tracker.save_seconds else None
    step_time = statistics.median(tracker.step_seconds) if tracker.step_seconds else None
    failures = history.all_fired()
    entries = journal.entries() if journal.path.exists() else []
    started = entries[0].get("time") if entries else None   # every line may be unreadable
    mtbf = (time.time() - started) / max(1, len(failures)) if started else None
    return save_interval_advice(save_cost, mtbf, step_time, config.save_interval)

