"""Data windows a run skips: the positions in the trainer's data stream that no optimizer step trains on.

The field manual's third remedy for a divergence: "skip the suspicious batch" (PaLM restarted ~100 steps before
a spike and skipped 200-500 batches). A skip keeps the step counter, and so the lr schedule, where the checkpoint
has it; only the data position moves past the window. Positions count batches, one per optimizer step, from 1:
with no skip, step s trains on position s; each window [a, b] passed shifts every later step by b - a + 1.

The windows reach every later launch as RUNBOOK_DATA_SKIP="a-b,c-d" (engine/language/actions/skip_data.py sets it like any
remedy's variable); the trainer maps its step to a position with `position` (runbook.sdk.data_position for a
script, the toy's own loop). PURE and standard library only: the trainer side imports it.

Once a launch has skipped, the trainer says what it left out in its own terms (dataset rows, a loader's samples in
its input folder, files and offsets: what that trainer can tell) on one line, `report_line`; the watcher reads it
back with `parse_report` and keeps it in the incident record that made the skip (engine/watch/incident_runner.py).
"""

from __future__ import annotations

import json

ENV = "RUNBOOK_DATA_SKIP"
MAX_WINDOWS = 1000   # a hostile or corrupt value is refused past this, not walked


def parse(text: str | None) -> list[tuple[int, int]]:
    """The windows of a RUNBOOK_DATA_SKIP value, sorted; ValueError naming what is wrong."""
    windows = []
    for part in (text or "").split(",")[:MAX_WINDOWS + 1]:
        if not part.strip():
            continue
        first, sep, last = part.strip().partition("-")
        if not sep or not first.isdigit() or not last.isdigit() or not 1 <= int(first) <= int(last):
            raise ValueError(f"{ENV}: {part.strip()[:40]!r} is not a window 'first-last' of positions from 1")
        windows.append((int(first), int(last)))
    if len(windows) > MAX_WINDOWS:
        raise ValueError(f"{ENV}: more than {MAX_WINDOWS} windows")
    return sorted(windows)


def format_windows(windows: list[tuple[int, int]]) -> str:
    return ",".join(f"{a}-{b}" for a, b in sorted(windows))


def position(step: int, windows: list[tuple[int, int]]) -> int:
    """The data position optimizer step `step` (from 1) trains on, every window passed."""
    pos = step
    for first, last in sorted(windows):
        if pos >= first:
            pos += last - first + 1
    return pos


def skip_steps(windows: list[tuple[int, int]], first_step: int, last_step: int) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """The windows with the positions steps first_step..last_step would train on added (merged with any they touch),
    and that new window. After it, step first_step trains on the position after last_step's."""
    new = (position(first_step, windows), position(last_step, windows))
    merged: list[tuple[int, int]] = []
    for a, b in sorted([*windows, new]):
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged, new


REPORT_PREFIX = "runbook: data skipped: "
MAX_REPORT_CHARS = 2000        # a report longer than this is cut to its first characters, never parsed unbounded
MAX_REPORT_RANGES = 50         # of indices, written "a-b"


def ranges(indices: list[int]) -> str:
    """PURE. Sorted indices as "a-b,c,e-f" (at most MAX_REPORT_RANGES ranges, then "... (N more)")."""
    spans: list[list[int]] = []
    for i in sorted(set(indices)):
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    text = ",".join(f"{a}-{b}" if a != b else str(a) for a, b in spans[:MAX_REPORT_RANGES])
    return text + (f" ... ({len(spans) - MAX_REPORT_RANGES} more ranges)" if len(spans) > MAX_REPORT_RANGES else "")


def report_line(where: dict) -> str:
    """The line a trainer prints once it has skipped: a JSON object of what it left out. One longer than
    MAX_REPORT_CHARS keeps its text, cut, under "cut"."""
    text = json.dumps(where, default=str)
    if len(text) > MAX_REPORT_CHARS:
        text = json.dumps({"cut": text[:MAX_REPORT_CHARS - 100]})
    return REPORT_PREFIX + text


def parse_report(line: str) -> dict | None:
    """PURE. A trainer's report read back from its log (a launcher's "[rank1]:" prefix allowed): a JSON object,
    or None for any other line and for a malformed, oversized or too deeply nested one."""
    at = line.find(REPORT_PREFIX)
    if at < 0 or at > 100:
        return None
    text = line[at + len(REPORT_PREFIX):].strip()
    if len(text) > MAX_REPORT_CHARS:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
