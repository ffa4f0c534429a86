"""Watcher paused vs running, in alternating blocks of one watched run: the within-run A/B.

Separate runs on a shared 2-vCPU VM differ by 20-35% in throughput (the trainer's own CPU time for the
same work swings as much), so comparing a bare run with a watched run cannot show a 2% cost. Inside one
run, the machine's drift is slow against a block of a second or two: pausing the watcher (SIGSTOP) and
letting it run (SIGCONT) in alternation, and comparing each running block with the paused block just
before it, cancels the drift. The estimate is conservative: work the watcher could not do while paused
(reading the lines, sealing a checkpoint saved meanwhile) is done when it runs again, inside a running
block, so the running blocks carry the watcher's work for both.

The arithmetic here is pure (stamps and blocks in, rates out); the pausing is in bench_overhead.py.
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Block:
    state: str        # "paused" or "running"
    start: float      # time.time()
    end: float


def steps_at(stamps: list[tuple[int, float]], t: float) -> float:
    """The optimizer step the trainer was at, at time t: linear between the step lines around t."""
    times = [when for _, when in stamps]
    i = bisect.bisect_left(times, t)
    if i == 0:
        return float(stamps[0][0])
    if i == len(stamps):
        return float(stamps[-1][0])
    (s0, t0), (s1, t1) = stamps[i - 1], stamps[i]
    return s0 + (s1 - s0) * (t - t0) / (t1 - t0) if t1 > t0 else float(s1)


def block_rate(stamps: list[tuple[int, float]], block: Block) -> float:
    """Optimizer steps per second within the block."""
    return (steps_at(stamps, block.end) - steps_at(stamps, block.start)) / (block.end - block.start)


def inside(stamps: list[tuple[int, float]], block: Block) -> bool:
    """Only blocks with step lines on both sides of them are measured (not the start-up, not the end)."""
    return bool(stamps) and stamps[0][1] <= block.start and block.end <= stamps[-1][1]


@dataclass
class PairedResult:
    ratios: list[float]          # running rate / mean rate of the paused blocks either side of it
    paused_rate: float           # pooled steps/s over all measured paused blocks
    running_rate: float

    @property
    def median_ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def pooled_ratio(self) -> float:
        return self.running_rate / self.paused_rate

    @property
    def mean_ratio(self) -> float:
        return statistics.fmean(self.ratios)

    @property
    def ci95(self) -> tuple[float, float]:
        """Normal-approximation 95% interval of the mean ratio."""
        mean = statistics.fmean(self.ratios)
        half = 1.96 * statistics.stdev(self.ratios) / len(self.ratios) ** 0.5 if len(self.ratios) > 1 else float("inf")
        return mean - half, mean + half


def paired_rates(stamps: list[tuple[int, float]], blocks: list[Block]) -> PairedResult:
    """Each running block against the mean rate of the paused blocks on either side of it (an
    A-B-A comparison: a linear drift cancels, and the reference is the mean of two blocks). Blocks
    outside the training window drop out."""
    measured = [b for b in blocks if inside(stamps, b)]
    ratios = []
    for before, running, after in zip(measured, measured[1:], measured[2:]):
        if (before.state, running.state, after.state) != ("paused", "running", "paused"):
            continue
        if running.start - before.end > 0.5 or after.start - running.end > 0.5:
            continue  # not adjacent
        reference = (block_rate(stamps, before) + block_rate(stamps, after)) / 2
        if reference > 0:
            ratios.append(block_rate(stamps, running) / reference)

    def pooled(state: str) -> float:
        chosen = [b for b in measured if b.state == state]
        steps = sum(steps_at(stamps, b.end) - steps_at(stamps, b.start) for b in chosen)
        seconds = sum(b.end - b.start for b in chosen)
        return steps / seconds if seconds else float("nan")

    return PairedResult(ratios, pooled("paused"), pooled("running"))


def merge(results: list[PairedResult]) -> PairedResult:
    """Several runs as one sample: all ratios; pooled rates as the mean of the runs'."""
    return PairedResult([r for result in results for r in result.ratios],
                        statistics.fmean(r.paused_rate for r in results),
                        statistics.fmean(r.running_rate for r in results))
