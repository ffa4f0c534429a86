"""Data windows a run skips: the positions in the trainer's data stream that no optimizer step trains on.

The field manual's third remedy for a divergence: "skip the suspicious batch" (PaLM restarted ~100 steps before
a spike and skipped 200-500 batches). A skip keeps the step counter, and so the lr schedule, where the checkpoint
has it; only the data position moves past the window. Positions count batches, one per optimizer step, from 1:
with no skip, step s trains on position s; each window [a, b] passed shifts every later step by b - a + 1.

The windows reach every later launch as RUNBOOK_DATA_SKIP="a-b,c-d" (engine/language/actions/skip_data.py sets it like any
remedy's variable); the trainer maps its step to a position with `position` (runbook.sdk.data_position for a
script, the toy's own loop). PURE and standard library only: the trainer side imports it.
"""

from __future__ import annotations

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
