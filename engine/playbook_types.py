"""Small value types of the playbook format, shared by the playbook model and the action params."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator

DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(value: Any) -> float:
    """30, "30s", "5m", "1h" -> seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    m = DURATION.match(str(value))
    if not m:
        raise ValueError(f"not a duration: {value!r} (use seconds or e.g. 30s, 5m, 1h)")
    return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]


Duration = Annotated[float, BeforeValidator(parse_duration)]
"""Seconds, written as a number or as 30s / 5m / 1h in YAML."""
