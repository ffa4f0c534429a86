"""PURE. Did every process of a group fail with one error before the launch's first progress line?

A rank that dies of a transient fault (a segfault in a kernel, a lost node) fails in its own way, at its
own time. Every rank failing before the first step with the same exception (a library or CUDA build
mismatch, a missing JIT-built extension, a bad path in the config) is deterministic: a restart meets it
again. What tells it, from the ranks' records and the launcher's report (launcher_report.py), else from the
log's tail when every rank printed its own traceback there:

- two or more processes failed, each with an exit code (no signal: a signal is another playbook's);
- every one's error is known and, its numbers and addresses masked (a rank, a pid, a port), the same.

The observer asks only before the launch's first progress line. Which class the error belongs to is not
decided here: a playbook that knows the words (oom, collective-timeout, disk-full) comes first.
"""

from __future__ import annotations

import re

from engine.core.state import RanksStatus

MAX_LINE = 2000
MAX_TAIL = 400
_RANK_PREFIX = re.compile(r"^\[(?:default)?rank\d{1,6}\]:\s?")
# A traceback's last line: `Type: message` at column 0 (a frame or a wrapped message is indented).
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w{0,80}\.){0,8}[A-Za-z_]\w{0,80}(?:Error|Exception|Failure)\b(?::.*)?$")
_IGNORED = re.compile(r"^Exception ignored in\b")   # a destructor's complaint after the failure: not the failure
_MASKS = ((re.compile(r"0x[0-9a-fA-F]{1,32}"), "<hex>"), (re.compile(r"\d{1,30}"), "<n>"))


def masked(error: str) -> str:
    text = _RANK_PREFIX.sub("", error[:MAX_LINE].strip())
    for pattern, placeholder in _MASKS:
        text = pattern.sub(placeholder, text)
    return " ".join(text.split())


def tail_errors(tail: list[str]) -> list[str]:
    """The error each traceback in the tail ends with (a destructor's 'Exception ignored in' block skipped)."""
    errors, ignored = [], False
    for raw in tail[-MAX_TAIL:]:
        line = _RANK_PREFIX.sub("", raw[:MAX_LINE]).rstrip()
        if _IGNORED.match(line):
            ignored = True
        elif _EXCEPTION.match(line):
            if not ignored:
                errors.append(line)
            ignored = False
    return errors


def same_error_everywhere(ranks: RanksStatus, tail: list[str]) -> str | None:
    """The one error every failed process ended with (as printed by one of them), or None."""
    failed = [r for r in ranks.ranks if r.exit_code is not None and r.exit_code != 0]
    if len(failed) != len(ranks.ranks):
        return None   # a rank still running, or one that ended 0: not every rank
    if any(r.signal is not None or r.exit_code is None or r.exit_code < 0 for r in failed):
        return None
    if len(failed) >= 2 and all(r.error for r in failed):
        errors = [r.error or "" for r in failed]
    else:
        errors = tail_errors(tail)   # one traceback per process: the ranks' own output in the log
        if len(errors) < max(2, len(failed)):
            return None
    if any(r.peer_loss for r in failed) or len({masked(e) for e in errors}) != 1:
        return None
    return _RANK_PREFIX.sub("", errors[-1].strip())[:500]


def last_error(tail: list[str]) -> str | None:
    """The masked error the tail's last traceback ends with (None: no error line), a launch's failure in one key."""
    errors = tail_errors(tail)
    return masked(errors[-1]) if errors else None


def alike_in_a_row(earlier: list[str | None], now: str | None) -> int:
    """How many launches in a row, this one last, failed before their first progress line with the error `now`:
    `earlier` holds the earlier launches' errors (None: that launch progressed, or showed no error)."""
    if now is None:
        return 0
    count = 1
    for error in reversed(earlier):
        if error != now:
            break
        count += 1
    return count
