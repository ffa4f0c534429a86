"""What a rollback moved out and why, and what its NaN scan could not read.

A checkpoint the scan cannot read is no proof of NaN: it is kept (the trainer's own load may read it) and said,
never quarantined as non-finite. A trainer's find_nonfinite raises UnreadableWeights to say so with its reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from engine.checkpoints.store import Checkpoint


class UnreadableWeights(Exception):
    """A checkpoint's weights could not be scanned; the message is one line naming the file and why."""


@dataclass
class RollbackResult:
    target: Checkpoint | None = None                            # the new resume point, None: the start
    quarantined: dict[int, str] = field(default_factory=dict)   # step -> why
    unreadable: dict[int, str] = field(default_factory=dict)    # step -> why it could not be scanned (kept)

    def __iter__(self) -> Iterator:
        """(how many moved, the new resume point): what callers unpacked before the steps were kept."""
        return iter((len(self.quarantined), self.target))

    def summary(self) -> str:
        """PURE. The steps actually moved, grouped by reason, then the ones kept unscanned."""
        by_reason: dict[str, list[int]] = {}
        for step, why in sorted(self.quarantined.items()):
            # "saved at step N, within ..." differs per step only in N: grouped as "at/after ..."
            key = why.split(", ", 1)[1] if why.startswith("saved at step ") else why
            by_reason.setdefault(key, []).append(step)
        groups = [f"{_steps(steps)} ({why})" for why, steps in by_reason.items()]
        text = f"quarantined {len(self.quarantined)} checkpoint(s)" + (f": {', '.join(groups)}" if groups else "")
        if self.unreadable:
            text += "; kept " + ", ".join(f"{_steps([s])} unscanned ({why})" for s, why in sorted(self.unreadable.items()))
        return text


def _steps(steps: list[int]) -> str:
    return f"step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps))}"
