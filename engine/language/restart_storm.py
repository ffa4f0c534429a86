"""A restart storm: incidents of several classes one after another, and the run never gets past the step where the
first of them failed (OOM -> hang -> collective timeout -> OOM ...: skypilot#10155, pytorch#147064). Each
playbook's limit counts its own firings, so a cycle through several classes trips none of them; this counts
them together. PURE: the matcher asks it before a recovery (engine/language/matcher.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass

Recovery = tuple[str, float, "int | None"]   # (playbook, epoch seconds, the step the run had reached then)


def _reached(step: int | None) -> int:
    return -1 if step is None else step   # no step yet: before the first


def chain_since_progress(recoveries: tuple[Recovery, ...], step_now: int | None) -> tuple[Recovery, ...]:
    """The recoveries since the earliest one the run has not got past: the longest suffix whose first's step is at
    least every later one's and the step now (a rollback that fails lower down is still no progress)."""
    highest, start = _reached(step_now), len(recoveries)
    for index in range(len(recoveries) - 1, -1, -1):
        step = _reached(recoveries[index][2])
        if step >= highest:
            start = index
        highest = max(highest, step)
    return recoveries[start:]


@dataclass(frozen=True)
class Storm:
    chain: tuple[Recovery, ...]
    playbook_now: str
    step_now: int | None

    def reason(self, now: float) -> str:
        first_step = self.chain[0][2]
        spent_min = (now - self.chain[0][1]) / 60
        links = ", ".join(f"{name} at step {'-' if step is None else step} ({time.strftime('%H:%M:%S', time.localtime(when))})"
                          for name, when, step in self.chain)
        return (f"restart storm: {len(self.chain) + 1} incidents of {len({n for n, _, _ in self.chain} | {self.playbook_now})} "
                f"kinds in {spent_min:.1f} min and the run never got past step {'-' if first_step is None else first_step}: "
                f"{links}, and now {self.playbook_now} at step {'-' if self.step_now is None else self.step_now}; "
                f"escalating instead of recovery {len(self.chain) + 1} (watch.restart_storm_incidents)")


def restart_storm(recoveries: tuple[Recovery, ...], playbook_now: str, step_now: int | None, limit: int,
                  not_counted: frozenset[str] = frozenset()) -> Storm | None:
    """A Storm when this incident would be the limit-th of a chain without progress that holds two kinds or more
    (one kind alone is its playbook's own limit's to judge: the OOM ladder halves six times)."""
    counted = tuple(r for r in recoveries if r[0] not in not_counted)
    chain = chain_since_progress(counted, step_now)
    if len(chain) + 1 >= limit and len({name for name, _, _ in chain} | {playbook_now}) >= 2:
        return Storm(chain, playbook_now, step_now)
    return None
