"""Advice computed from what the run has shown, not from rules of thumb."""

from __future__ import annotations

import math


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
