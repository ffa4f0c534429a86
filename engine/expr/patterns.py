"""Playbook log patterns, matched by RE2: linear time in the line's length, whatever the pattern.

Python's `re` backtracks: `^(a+)+$` against 45 characters takes longer than a run lives, and a
watcher would hang on one log line. RE2 (google-re2) cannot backtrack, so it has no such patterns;
the price is that backreferences and lookaround are not available, which load refuses by name.
Lines longer than MAX_LINE (1 MB) are matched on their first MAX_LINE characters.
"""

from __future__ import annotations

from typing import Any

import re2

MAX_LINE = 1_000_000  # RE2 is linear, so this only bounds the work per line; `$` then means "at this length"
MAX_PATTERN = 2000


def compile_pattern(pattern: str, ignore_case: bool) -> Any:   # re2's pattern: google-re2 ships no types
    """A compiled RE2 pattern (with .search like `re`), or a ValueError that says why not."""
    if len(pattern) > MAX_PATTERN:
        raise ValueError(f"regular expression longer than {MAX_PATTERN} characters")
    options = re2.Options()
    options.case_sensitive = not ignore_case
    options.log_errors = False  # the reason goes into our one-sentence error, not onto stderr
    try:
        return re2.compile(pattern, options)
    except re2.error as err:
        reason = err.args[0].decode(errors="replace") if err.args and isinstance(err.args[0], bytes) else str(err)
        raise ValueError(f"bad regular expression {pattern!r}: {reason} (RE2 syntax: no backreferences or lookaround)") from None
