"""Small value types of the playbook format, shared by the playbook model and the action params."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator

DURATION = re.compile(r"^\s*(\d{1,12}(?:\.\d{1,9})?)\s*(ms|s|m|h|d)?\s*$")
MAX_DURATION = 10 * 365 * 86400.0   # ten years: longer is a typo, and arithmetic on it must stay finite
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(value: Any) -> float:
    """30, "30s", "5m", "1h" -> seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value) if abs(value) < 1e300 else math.inf
    else:
        m = DURATION.match(str(value)[:100])
        if not m:
            raise ValueError(f"not a duration: {str(value)[:40]!r} (use seconds or e.g. 30s, 5m, 1h)")
        seconds = float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    if not math.isfinite(seconds) or abs(seconds) > MAX_DURATION:
        raise ValueError(f"duration out of range (at most {MAX_DURATION:.0f} s, ten years)")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]
"""Seconds, written as a number or as 30s / 5m / 1h in YAML."""
