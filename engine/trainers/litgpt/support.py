"""Which litgpt versions runbook supports: the range in pyproject.toml, checked before a launch.

runbook relies on measured litgpt behaviour (its progress lines, checkpoint files, save through
$TMPDIR); a version outside the tested range is refused in one sentence rather than misread later.
"""

from __future__ import annotations

import re

SUPPORTED_MIN = (0, 5, 13)   # tested (constraints.txt)
SUPPORTED_BELOW = (0, 6)     # a 0.x minor may change what runbook reads
SUPPORTED_RANGE = ">=0.5.13,<0.6"   # as written in pyproject.toml (tests/unit/test_packaging.py keeps them equal)


def release(version: str) -> tuple[int, ...] | None:
    """PURE. The numeric release of a version string ("0.5.13", "0.5.13.dev1", "0.6.0rc1"), or None."""
    found = re.match(r"^\s*v?(\d+(?:\.\d+)*)", version)
    return tuple(int(part) for part in found.group(1).split(".")) if found else None


def version_problem(version: str | None) -> str | None:
    """PURE. One sentence when litgpt `version` is outside the supported range, else None."""
    numbers = release(version) if version else None
    if numbers is not None and SUPPORTED_MIN <= numbers and numbers[:len(SUPPORTED_BELOW)] < SUPPORTED_BELOW:
        return None
    return (f"litgpt {version or '(unknown version)'} is installed but runbook supports litgpt {SUPPORTED_RANGE}; "
            f"install a supported one (`pip install 'litgpt{SUPPORTED_RANGE}'`)")


def installed_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("litgpt")
    except PackageNotFoundError:
        return None
