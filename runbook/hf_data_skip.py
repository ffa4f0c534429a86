"""The Hugging Face Trainer's side of a skipped data window (RUNBOOK_DATA_SKIP, engine/core/data_windows.py),
installed by RunbookCallback.on_train_begin: the training sampler leaves out the samples of the skipped positions.

Why the sampler: the Trainer resumes by skipping the batches its global step has trained
(`skip_first_batches` over the same batch sampler), and it reads each epoch in the order of one seeded sampler
(accelerate's SeedableRandomSampler). Filtering that order drops exactly the window's samples, and the resume's own
skip then lands where the window ends: step s trains on position data_position(s). Global step, lr schedule and
the number of steps are the Trainer's, untouched. One position is one optimizer step's samples over every rank
(per_device_train_batch_size x gradient_accumulation_steps x world size); accelerate hands whole batches of the
filtered order to the ranks in turn, so each rank leaves out its share.

Limits, said in docs/trainers.md: an IterableDataset has no sampler (nothing is skipped, said once); an epoch
with a window ends that many steps early (the Trainer moves to the next epoch).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterator

from runbook import sdk

if TYPE_CHECKING:   # annotations only
    from collections.abc import Mapping

    from transformers import TrainingArguments


class SkippingSampler:
    """The sampler's order with the skipped positions' samples left out; its length and epoch are the inner's.
    `announce` hears, once, the dataset rows it left out (as soon as the order has passed every window, or at the
    epoch's end): engine/core/data_windows.py's report, which the watcher keeps in the incident."""

    def __init__(self, inner: Any, windows: list[tuple[int, int]], per_position: int,
                 announce: Callable[[dict], None] | None = None):
        self.inner, self.windows, self.per_position = inner, windows, per_position
        self.epoch = 0
        self.announce = announce
        self.last_position = max(b for _, b in windows)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if hasattr(self.inner, "set_epoch"):
            self.inner.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[int]:
        first = self.epoch * (len(self.inner) // self.per_position)   # positions of the epochs before this one
        left_out: list[int] = []
        for j, index in enumerate(self.inner):
            position = first + j // self.per_position + 1
            if any(a <= position <= b for a, b in self.windows):
                left_out.append(int(index))
                continue
            if left_out and position > self.last_position:
                self._tell(left_out)
            yield index
        if left_out:
            self._tell(left_out)

    def _tell(self, left_out: list[int]) -> None:
        if self.announce is not None:
            announce, self.announce = self.announce, None   # once: a later epoch skips nothing new
            windows = sdk._data_windows()
            announce({"epoch": self.epoch, "dataset_rows": windows.ranges(left_out), "rows": len(left_out),
                      "of": "the Trainer's train_dataset (row indices)"})


def _innermost_batch_sampler(loader: Any) -> Any:
    batch_sampler = getattr(loader, "batch_sampler", None)
    while batch_sampler is not None and hasattr(batch_sampler, "batch_sampler"):   # accelerate's BatchSamplerShard
        batch_sampler = batch_sampler.batch_sampler
    return batch_sampler


def install(train_dataloader: Any, args: TrainingArguments, environ: Mapping[str, str] = os.environ) -> str | None:
    """Filter the loader's sampler by the windows in force; what was done, for the log (None: nothing to skip)."""
    windows_module = sdk._data_windows()
    try:
        windows = windows_module.parse(environ.get(windows_module.ENV))
    except ValueError as error:
        return f"{error}: no data skipped"
    if not windows:
        return None
    batch_sampler = _innermost_batch_sampler(train_dataloader)
    sampler = getattr(batch_sampler, "sampler", None)
    if sampler is None:
        return (f"{windows_module.ENV} is set but this Trainer's data has no sampler (an IterableDataset?): "
                "no data skipped")
    if isinstance(sampler, SkippingSampler):
        sampler = sampler.inner
    world = int(getattr(args, "world_size", 1) or 1)
    per_position = args.per_device_train_batch_size * args.gradient_accumulation_steps * world
    rank_zero = int(getattr(args, "process_index", 0) or 0) == 0   # every rank leaves out the same rows: one says so
    batch_sampler.sampler = SkippingSampler(sampler, windows, per_position,
                                            (lambda where: say_report(windows_module.report_line(where))) if rank_zero else None)
    return (f"skipping data positions {windows_module.format_windows(windows)} "
            f"({per_position} samples each, left out of the sampler's order)")


def say(text: str) -> None:
    print(f"runbook: {text}", file=sys.stderr, flush=True)


def say_report(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
