"""PURE. Which numbers read off a run folder may be shown as they are (status, live view, report).

Heartbeats, journal entries and incident records are files: a foreign writer, a broken clock or an
edit can put a time of 1e300 or a step of -5 in them. Shown as they are, they read as plausible ("0 s
ago", "at step -5"); these checks say they are invalid instead, and why.
"""

from __future__ import annotations

import math
from typing import TypeGuard

MAX_STEP = 10**15            # the trainer log parser's own bound (15 digits, engine/trainers/litgpt/log_lines.py)
MAX_COUNT = 10**21           # tokens: steps x a batch of tokens
CLOCK_SKEW_S = 300.0         # a time up to this far in the future is another host's clock, not nonsense
EARLIEST_TIME = 946_684_800.0   # 2000-01-01: no run folder was written before

# Fields of an incident record that count steps or tokens: never negative.
INCIDENT_STEPS = ("step_at_failure", "resumed_step", "steps_lost", "rollback_target_step")
INCIDENT_COUNTS = ("tokens_lost", "tokens_at_failure")


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def step_problem(value: object, limit: int = MAX_STEP) -> str | None:
    """Why `value` is no step (or count) to show: not a whole number, negative, beyond `limit`; None when valid
    or absent."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        return f"{_short(value)} is not a whole number"
    if value < 0:
        return f"{value} is negative"
    if value > limit:
        return f"{_short(value)} is beyond {limit:.0e}"
    return None


def time_problem(value: object, now: float) -> str | None:
    """Why `value` is no wall-clock time of this run (seconds since the epoch): not a finite number, before
    2000, or further in the future than a clock's skew; None when valid."""
    if not _number(value):
        return f"{_short(value)} is not a number"
    if not math.isfinite(value):
        return f"{value} is not finite"
    if value > now + CLOCK_SKEW_S:
        return f"{_short(value)} is {_short(value - now)} s in the future"
    if value < EARLIEST_TIME:
        return f"{_short(value)} is before 2000"
    return None


def step_text(value: object) -> str:
    """A step as shown: '-' when unknown, 'invalid (why)' when out of range, else the number."""
    if value is None:
        return "-"
    problem = step_problem(value)
    return f"invalid ({problem})" if problem else str(value)


def checked_incident(record: dict) -> tuple[dict, list[str]]:
    """The record with every out-of-range step or token count set to None (so no sum or plot uses it) and
    named under "invalid" ({key: why}, for the views to say so), and one sentence per value dropped."""
    clean, problems, invalid = dict(record), [], {}
    for key in INCIDENT_STEPS + INCIDENT_COUNTS:
        problem = step_problem(record.get(key), MAX_STEP if key in INCIDENT_STEPS else MAX_COUNT)
        if problem:
            clean[key], invalid[key] = None, problem
            problems.append(f"{record.get('id', 'an incident')}: {key} invalid ({problem}); not counted")
    if invalid:
        clean["invalid"] = invalid
    return clean, problems


def field_text(record: dict, key: str, fmt: str = "{}") -> str:
    """One of a checked record's numbers as shown: 'invalid (why)' when checked_incident dropped it."""
    why = (record.get("invalid") or {}).get(key)
    if why:
        return f"invalid ({why})"
    value = record.get(key)
    return "-" if value is None else fmt.format(value)


def _short(value: object) -> str:
    text = f"{value:.4g}" if isinstance(value, float) else repr(value)
    return text if len(text) <= 40 else text[:40] + "..."
