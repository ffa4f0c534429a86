"""PURE. What a trainer's progress line stands for, and the one throughput arithmetic over it.

Each trainer adapter declares its ProgressMeaning (engine/trainers/<kind>/adapter.py, `progress_meaning`);
everything that shows tokens, tokens/s or an ETA (the watch's observer, its heartbeat and Prometheus metrics,
`runbook status`, `runbook report`, `runbook triage`) computes it here from that declaration, so no two of
them can disagree on what a line is worth.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.core.config import RunConfig


@dataclass(frozen=True)
class ProgressMeaning:
    """Tokens, all ranks together, behind the numbers of one progress line (engine/observe/events.Progress)."""

    tokens_per_iter: int                 # one unit of Progress.iter_num: tokens so far = iter_num x this
    tokens_per_timed_line: int | None = None   # what the line's iter_time_ms measured; None: one iter_num unit
    tokens_per_step: int | None = None   # one optimizer step (the global batch): the ETA over the steps left

    @property
    def timed_tokens(self) -> int:
        return self.tokens_per_iter if self.tokens_per_timed_line is None else self.tokens_per_timed_line

    @property
    def step_tokens(self) -> int:
        return self.tokens_per_iter if self.tokens_per_step is None else self.tokens_per_step


def accumulation(batch_size: int, micro_batch_size: int, world_size: int) -> int:
    """Micro-batches per optimizer step on each rank, as every trainer kind is told."""
    return max(1, batch_size // (micro_batch_size * world_size))


def micro_batch_meaning(config: RunConfig) -> ProgressMeaning:
    """A progress line per micro-batch iteration timed alone (a pretrain loop's `iter`; an adapter that declares nothing):
    one micro-batch on each of devices x num_nodes ranks; an optimizer step is `accumulation` of them."""
    world = config.trainer.devices * config.trainer.num_nodes
    per_iter = config.micro_batch_size * config.model.block_size * world
    return ProgressMeaning(per_iter, per_iter, per_iter * accumulation(config.batch_size, config.micro_batch_size, world))


def optimizer_step_meaning(config: RunConfig, world_size: int, steps_per_line: int = 1) -> ProgressMeaning:
    """A progress line per `steps_per_line` optimizer steps, counting steps (runbook.sdk's line: a script, HF's
    callback), timed since the previous line: the global batch each step, micro x accumulation x ranks."""
    micro = config.micro_batch_size
    step = micro * accumulation(config.batch_size, micro, world_size) * world_size * config.model.block_size
    return ProgressMeaning(step, step * steps_per_line, step)


def progress_meaning_of(adapter: object, config: RunConfig) -> ProgressMeaning:
    """The adapter's word on its progress line (TrainerAdapter.progress_meaning) under a run config (RunConfig);
    one micro-batch per rank for an adapter that gives none."""
    declared = getattr(adapter, "progress_meaning", None)
    return declared(config) if declared is not None else micro_batch_meaning(config)


def tokens_per_sec(meaning: ProgressMeaning, iter_times_ms: Iterable[float]) -> float | None:
    """Tokens/s over these lines' times: total tokens / total time, so a process stopped now and then shows
    (a median of line times would hide it). None without a positive finite time."""
    times = [t for t in iter_times_ms if math.isfinite(t)]
    total_s = sum(times) / 1000
    return meaning.timed_tokens * len(times) / total_s if times and total_s > 0 else None


def tokens_so_far(meaning: ProgressMeaning, iter_num: int | None) -> int | None:
    return None if iter_num is None else iter_num * meaning.tokens_per_iter


def eta_seconds(meaning: ProgressMeaning, steps_left: int, tokens_per_second: float | None) -> float | None:
    """Seconds to train `steps_left` optimizer steps at this rate; None while the rate is unknown or nothing is left."""
    if not tokens_per_second or steps_left <= 0:
        return None
    return steps_left * meaning.step_tokens / tokens_per_second
