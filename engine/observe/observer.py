"""Turns what can be seen from outside (log lines, checkpoint folder, disk, the process) into snapshots."""

from __future__ import annotations

import math
import shutil
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from engine.core import data_windows
from engine.observe.activity import StartupActivity
from engine.observe.launcher_report import awaiting_first_failure, read_report, with_report
from engine.observe.events import CheckpointSaving, Event, FinalValidation, Progress, Validation, ValidationStarted
from engine.observe.evidence import EvidenceGatherer
from engine.observe.other_stacks import other_stack_progress
from engine.observe.same_start_error import alike_in_a_row, last_error, same_error_everywhere
from engine.observe.throughput import ProgressMeaning, tokens_per_sec, tokens_so_far
from engine.core.state import CheckpointStatus, DiskStatus, Metrics, RunPhase, StateSnapshot, TrainerStatus

if TYPE_CHECKING:
    from engine.core.settings import WatchSettings

WARMUP_PROGRESS_LINES = 10   # iterations after a launch ignored for the throughput baseline
BASELINE_SAMPLES = 20
HEALTHY_RATIO = 1.5          # a loss within this factor of the best rolling median counts as healthy
BEST_MEDIAN_WINDOW = 3       # logged losses in the rolling median whose minimum is the spike baseline
MAX_EARLIER_LAUNCHES = 16   # launches whose start-up failure is remembered (a row of them is what counts)
MAX_DATA_SKIP_REPORTS = 16  # per launch: one a rank (engine/core/data_windows.py's report line)


MAX_LINE_BYTES = 64 * 1024          # a longer line is cut to this (a progress or error line is far shorter)
MAX_READ_BYTES = 4 * 1024 * 1024    # per observation: a flood is read over several ticks, never at once


class LogTail:
    """Reads complete new lines from a growing file (a partial last line waits for its newline).

    Bounded whatever the trainer prints: one observation reads at most MAX_READ_BYTES (a flood is
    caught up over the next ticks), and a line longer than MAX_LINE_BYTES is kept cut to that length
    (the rest of it is skipped up to its newline), so a 100 MB line costs neither memory nor time."""

    def __init__(self, path: Path, offset: int = 0):
        self.path = path
        self.offset = offset
        self._partial = b""
        self._cut = 0          # bytes dropped from the current over-long line

    def read(self) -> list[str]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(MAX_READ_BYTES)
        except FileNotFoundError:
            return []
        self.offset += len(data)
        *complete, rest = data.split(b"\n")
        lines = []
        for piece in complete:
            lines.append(self._finish(self._partial + piece))
            self._partial, self._cut = b"", 0
        self._partial += rest
        if len(self._partial) > MAX_LINE_BYTES:
            self._cut += len(self._partial) - MAX_LINE_BYTES
            self._partial = self._partial[:MAX_LINE_BYTES]
        return lines

    def _finish(self, raw: bytes) -> str:
        cut = self._cut + max(0, len(raw) - MAX_LINE_BYTES)
        text = raw[:MAX_LINE_BYTES].decode("utf-8", errors="replace").rstrip("\r")
        return f"{text} [... {cut} bytes cut]" if cut else text


@dataclass
class MetricTracker:
    meaning: ProgressMeaning   # what one progress line stands for (the trainer adapter's word)
    loss_window: int = 20
    losses: deque = field(default_factory=lambda: deque(maxlen=20))
    iter_times: deque = field(default_factory=lambda: deque(maxlen=10))
    baseline_samples: deque = field(default_factory=lambda: deque(maxlen=BASELINE_SAMPLES))
    baseline: float | None = None
    best_median: float | None = None
    early_median: float | None = None   # the run's first BEST_MEDIAN_WINDOW finite losses: where it started
    # the first bad steps of this run's divergence rollbacks, oldest first: the watch shares this list with each
    # incident's runtime (a rollback appends) and restores it from the journal at start
    divergences: list = field(default_factory=list)
    last_healthy_step: int | None = None
    val_condemned_step: int | None = None   # this launch's weights failed validation from this step on
    progress_since_launch: int = 0
    step: int | None = None
    iter_num: int | None = None
    loss: float | None = None
    val_loss: float | None = None
    best_val_loss: float | None = None
    best_val_step: int | None = None
    final_val_loss: float | None = None
    grad_norm: float | None = None   # as the newest progress line printed it (None: its trainer prints none)
    lr: float | None = None
    last_progress_time: float | None = None
    longest_gap_s: float | None = None     # between two progress lines of any launch (covers eval + save)
    save_started: float | None = None
    validation_started: float | None = None   # `Validating ...` read, no progress line since
    validations_done: int = 0                 # of the whole run: the first one is what no gap has measured yet
    save_seconds: deque = field(default_factory=lambda: deque(maxlen=10))
    step_seconds: deque = field(default_factory=lambda: deque(maxlen=20))
    progress_lines_since_launch_at: float | None = None
    saving: list[str] = field(default_factory=list)
    data_skip_reports: list[dict] = field(default_factory=list)   # this launch's: what its ranks said they skipped

    def new_launch(self, meaning: ProgressMeaning, resumed_step: int | None = None) -> None:
        """A relaunch keeps what describes the run (throughput baseline, longest progress gap, the
        spike baseline and the last healthy step) and forgets what describes the old process.
        resumed_step: the step it resumes from (0: from scratch), when the launcher knows it."""
        self.meaning = meaning
        if resumed_step is not None and self.step is not None:
            # The run is at the step it resumes from, not at the old process's last line read (a recovery stops it
            # without reading its last lines): a failure before the relaunch's first progress line would otherwise
            # say the old step, and after a rollback count the steps that rollback lost a second time.
            self.step, self.iter_num = resumed_step, None
        self.progress_since_launch = 0
        self.iter_times.clear()
        self.baseline_samples.clear()  # a new process warms up again; the baseline itself is kept
        # longest_gap_s is kept: a relaunch's first save is as slow as the last launch's, and a
        # timeout learnt from its few save-free gaps would call that save a hang.
        self.last_progress_time = None
        self.save_started = None
        self.validation_started = None
        # The recent losses go (they may be the spike just rolled back, and would match again at
        # once); the best median stays, so a run resumed from a checkpoint saved mid-divergence is
        # still measured against the healthy loss, not against its own diverged level.
        self.losses.clear()
        self.val_condemned_step = None   # a relaunch starts from other (checkpointed) weights
        self.loss = None   # the old process's: a NaN it printed would match again before the relaunch prints a loss
        self.grad_norm = self.lr = None
        self.data_skip_reports = []

    def on_event(self, event: Event, now: float) -> None:
        if isinstance(event, Progress):
            if self.progress_since_launch == 0 and self.last_healthy_step is not None and event.step_known:
                # Resumed at event.step - 1: after a rollback, nothing later than that is known healthy.
                self.last_healthy_step = min(self.last_healthy_step, event.step - 1)
            if event.step_known:   # a count of lines is no step: the metrics say the step is unknown
                self.step, self.iter_num = event.step, event.iter_num
            self.loss, self.grad_norm, self.lr = event.loss, event.grad_norm, event.lr
            self.losses.append(event.loss)
            self._update_best_median()
            healthy = self.best_median is None or (math.isfinite(event.loss) and event.loss <= HEALTHY_RATIO * self.best_median)
            # After a failed validation a train loss that looks fine again (a collapsed model sits near
            # ln(vocab)) vouches for nothing more in this launch.
            if healthy and self.val_condemned_step is None and event.step_known:
                self.last_healthy_step = event.step
            self.progress_since_launch += 1
            if self.last_progress_time is not None:
                gap = now - self.last_progress_time
                self.longest_gap_s = gap if self.longest_gap_s is None else max(self.longest_gap_s, gap)
                if self.save_started is None and self.validation_started is None:
                    self.step_seconds.append(gap)
            if self.save_started is not None:  # the save (and eval) ended when progress resumed
                self.save_seconds.append(now - self.save_started)
                self.save_started = None
            if self.validation_started is not None:   # this gap, validation included, is in longest_gap_s now
                self.validations_done += 1
                self.validation_started = None
            self.last_progress_time = now
            timed = math.isfinite(event.iter_time_ms)   # another stack's line may give no time per step (other_stacks.py)
            if self.progress_since_launch > 1 and timed:  # the first iteration after a start includes set-up time
                self.iter_times.append(max(event.iter_time_ms, 1e-3))
            if self.progress_since_launch > WARMUP_PROGRESS_LINES and self.iter_times:
                # The baseline is the best sustained speed this run has shown (the highest rolling
                # median so far): a start on a busy machine must not make later slowness look normal.
                self.baseline_samples.append(self.throughput())
                if len(self.baseline_samples) == BASELINE_SAMPLES:
                    sustained = statistics.median(self.baseline_samples)
                    self.baseline = sustained if self.baseline is None else max(self.baseline, sustained)
        elif isinstance(event, Validation):
            self.val_loss = event.val_loss
            # litgpt validates the weights after update `step`, the ones checkpoint `step` holds: an
            # unhealthy val loss condemns that checkpoint, even where the train loss still looked fine.
            if self.step is not None and not self._val_healthy(event.val_loss):
                self.last_healthy_step = self.step if self.last_healthy_step is None else min(self.last_healthy_step, self.step)
                if self.val_condemned_step is None:
                    self.val_condemned_step = self.step
            if math.isfinite(event.val_loss) and (self.best_val_loss is None or event.val_loss < self.best_val_loss):
                self.best_val_loss, self.best_val_step = event.val_loss, self.step
        elif isinstance(event, ValidationStarted):
            if self.validation_started is None:
                self.validation_started = now
        elif isinstance(event, CheckpointSaving):
            self.saving.append(event.path)
            self.save_started = now
        elif isinstance(event, FinalValidation):
            self.final_val_loss = event.val_loss

    def _val_healthy(self, val_loss: float) -> bool:
        if not math.isfinite(val_loss):
            return False
        return self.best_val_loss is None or val_loss <= HEALTHY_RATIO * self.best_val_loss

    def _update_best_median(self) -> None:
        recent = [x for x in list(self.losses)[-BEST_MEDIAN_WINDOW:] if math.isfinite(x)]
        if len(recent) == BEST_MEDIAN_WINDOW:
            median = statistics.median(recent)
            self.best_median = median if self.best_median is None else min(self.best_median, median)
            if self.early_median is None:   # kept across launches, like the best: a run ends measured against its start
                self.early_median = median

    def throughput(self) -> float | None:
        """Tokens/s over the recent iterations: total tokens / total wall time, so a process that is
        stopped now and then shows up (a median of iteration times would hide it)."""
        return tokens_per_sec(self.meaning, self.iter_times)

    def metrics(self) -> Metrics:
        finite = [x for x in self.losses if math.isfinite(x)]
        tps = self.throughput()
        tokens = tokens_so_far(self.meaning, self.iter_num)
        return Metrics(
            step=self.step, iter_num=self.iter_num, tokens=tokens, loss=self.loss, val_loss=self.val_loss,
            best_val_loss=self.best_val_loss, best_val_step=self.best_val_step,
            loss_median=statistics.median(finite) if finite else None, loss_best_median=self.best_median,
            loss_early_median=self.early_median,
            previous_bad_step=self.divergences[-1] if self.divergences else None,
            last_healthy_step=self.last_healthy_step,
            loss_history=list(self.losses),
            tokens_per_sec=tps, baseline_tokens_per_sec=self.baseline, grad_norm=self.grad_norm, lr=self.lr,
        )


class LineParser(Protocol):
    """The trainer adapter's reading of its output (engine/trainers, a floor above this one)."""

    def parse_line(self, line: str) -> Event | None: ...


class Observer:
    def __init__(self, adapter: LineParser, out_dir: Path, meaning: ProgressMeaning, tail_lines: int = 200,
                 evidence: EvidenceGatherer | None = None, tracker: MetricTracker | None = None):
        self.adapter = adapter
        self.out_dir = out_dir
        self.tracker = tracker or MetricTracker(meaning)   # a finished log's reader keeps its events (log_replay.py)
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self.log: LogTail | None = None
        self.observation = 0
        self.launched_at = time.time()
        self.activity = StartupActivity(self.launched_at)   # start-up's signs of life (activity.py)
        self.evidence = evidence or EvidenceGatherer(out_dir)   # beyond the log text (evidence.py)
        self.awaiting_since: float | None = None   # when this launch's group began failing (launcher_report.py)
        # Another stack's progress line waits for the next line or one observation: HF Trainer prints its logged
        # dict just before runbook's callback prints the same step in runbook's format, which then replaces it
        # (no step counted twice), whether the two lines are read in one observation or across two.
        self._other_stack: tuple[Progress, float, int] | None = None   # (event, when read, observation then)
        self._own_progress = False   # the adapter's parser has read a progress line: other stacks' are not read
        self.lines_since_progress = 0   # lines read after this launch's last progress line
        # Each earlier launch's error, by its log, if it ended before its first progress line (None: it
        # progressed): a deterministic start-up failure repeats launch after launch
        # (same_start_error.alike_in_a_row). Journaled (launch_ended), so a restarted watcher recalls them.
        self.earlier_launches: dict[str, str | None] = {}

    def follow(self, log_path: Path, meaning: ProgressMeaning, replay_existing: bool = False,
               resumed_step: int | None = None) -> tuple[str, str | None] | None:
        """Start reading a new launch's log. With replay_existing, earlier lines rebuild the metrics only;
        resumed_step is the step the launch resumes from (0: from scratch), where the launcher knows it.
        Returns the launch that ends here (its log, its start-up failure if it never progressed), if one was followed."""
        ended = None
        if self.log is not None:
            ended = (str(self.log.path), last_error(list(self.tail)) if self.tracker.progress_since_launch == 0 else None)
            self.recall_launches(dict([ended]))
        self.tracker.new_launch(meaning, resumed_step)
        self.tail.clear()  # log clauses over the tail must not match a previous launch's crash
        self._other_stack = None
        self.lines_since_progress = 0
        self.log = LogTail(log_path)
        self.launched_at = time.time()
        self.awaiting_since = None
        self.activity.reset(self.launched_at)
        if replay_existing:
            for line in self.log.read():
                self._consume(line, self.launched_at)
        return ended

    def recall_launches(self, start_errors: dict[str, str | None]) -> None:
        """Earlier launches' start-up failures by log (the journal's, at a watcher's start), the newest kept."""
        for log, error in start_errors.items():
            self.earlier_launches.pop(log, None)
            self.earlier_launches[log] = error
        while len(self.earlier_launches) > MAX_EARLIER_LAUNCHES:
            del self.earlier_launches[next(iter(self.earlier_launches))]

    def _consume(self, line: str, now: float) -> None:
        self.tail.append(line)
        self.lines_since_progress += 1
        if data_windows.REPORT_PREFIX in line and len(self.tracker.data_skip_reports) < MAX_DATA_SKIP_REPORTS:
            report = data_windows.parse_report(line)
            if report is not None:
                self.tracker.data_skip_reports.append(report)
        event = self.adapter.parse_line(line)
        if isinstance(event, Progress):
            self._own_progress, self._other_stack = True, None   # the trainer's own line for the same step
            self.lines_since_progress = 0
        self._flush_other_stack()
        if event is not None:
            self.tracker.on_event(event, now)
        elif not self._own_progress:
            other = other_stack_progress(line, self.tracker.step)   # counted on across launches: never back to 1
            if other is not None:
                self._other_stack = (other, now, self.observation)
                self.lines_since_progress = 0

    def _flush_other_stack(self, read_before: int | None = None) -> None:
        """Count the waiting line (with the time it was read); with read_before, only one read before that observation."""
        if self._other_stack is not None and (read_before is None or self._other_stack[2] < read_before):
            event, seen, _ = self._other_stack
            self._other_stack = None
            self.tracker.on_event(event, seen)

    def read_lines(self, now: float) -> list[str]:
        before = self.log.offset if self.log else 0
        lines = self.log.read() if self.log else []
        if self.log and self.log.offset > before:   # any output, a progress bar's partial line included
            self.activity.output(now)
        for line in lines:
            self._consume(line, now)
        return lines

    def take_lines(self, lines: list[str], now: float) -> list[str]:
        """Lines that come from elsewhere than the followed log (`runbook triage`'s pasted log), parsed
        exactly as read_lines parses the log's."""
        for line in lines:
            self._consume(line, now)
        self._flush_other_stack()   # a whole log: no line follows the last
        return lines

    def hang_timeout(self, watch: WatchSettings) -> float:
        """The run's own measure of "too long without progress": the longest gap seen (in any launch)
        x a safety factor, clamped to [floor, ceiling]; the ceiling until this launch has printed its
        first progress line, since start-up (imports, data, model, resume) is not a progress gap."""
        gap = self.tracker.longest_gap_s
        if gap is None or self.tracker.progress_since_launch == 0:
            return watch.hang_timeout_s
        return min(watch.hang_timeout_s, max(watch.hang_floor_s, watch.hang_safety_factor * gap))

    def snapshot(self, now: float, run_state: RunPhase, trainer: TrainerStatus, checkpoints: CheckpointStatus,
                 new_lines: list[str], watch: WatchSettings) -> StateSnapshot:
        self.observation += 1
        # Waited a whole observation, or the trainer is gone and prints nothing more: nothing replaces it.
        self._flush_other_stack(read_before=self.observation - 1 if trainer.alive else None)
        trainer = self._first_failure(trainer, now, watch)
        last = self.tracker.last_progress_time
        since = now - last if last else now - self.launched_at
        if self.tracker.progress_since_launch == 0:
            trainer = self._judged_by_life(trainer, now, "startup", watch)
        elif self.tracker.save_started is not None:
            trainer = self._judged_by_life(trainer, now, "saving", watch)
        elif self.tracker.validation_started is not None and self.tracker.validations_done == 0:
            # The run's first validation: no gap has measured one yet, so a timeout learnt from training
            # steps says nothing about it. Later ones are inside longest_gap_s, and judged by it.
            trainer = self._judged_by_life(trainer, now, "validating", watch)
        return StateSnapshot(
            observation=self.observation, time=now, run_state=run_state, trainer=trainer,
            metrics=self.tracker.metrics(), seconds_since_progress=since, hang_timeout_s=self.hang_timeout(watch),
            startup_timeout_s=watch.startup_timeout_s, save_timeout_s=watch.save_timeout_s,
            new_lines=new_lines,
            tail=list(self.tail), lines_since_progress=min(self.lines_since_progress, len(self.tail)),
            disk=disk_status(self.out_dir), checkpoints=checkpoints,
            evidence=self.evidence.gather(trainer, checkpoints),
        )

    def _first_failure(self, trainer: TrainerStatus, now: float, watch: WatchSettings) -> TrainerStatus:
        """The launcher's report merged into the ranks (engine/observe/launcher_report.py), and whether to wait
        for it: a group failing under a live launcher is decided by its first failed rank, once known, or
        after watch.first_failure_wait_s."""
        tail = list(self.tail)
        ranks = with_report(trainer.ranks, read_report(tail), trainer.pid)
        waiting = False
        if trainer.alive and awaiting_first_failure(ranks, tail):
            self.awaiting_since = self.awaiting_since or now
            waiting = now - self.awaiting_since < watch.first_failure_wait_s
        alike = 0
        if not trainer.alive and self.tracker.progress_since_launch == 0:
            ranks = ranks.model_copy(update={"same_error_before_progress": same_error_everywhere(ranks, tail)})
            current = str(self.log.path) if self.log else None   # a restarted watcher recalls this launch too
            alike = alike_in_a_row([e for log, e in self.earlier_launches.items() if log != current], last_error(tail))
        return trainer.model_copy(update={"ranks": ranks, "awaiting_first_failure": waiting,
                                          "failed_alike_before_progress": alike})

    def _judged_by_life(self, trainer: TrainerStatus, now: float, phase: str, watch: WatchSettings) -> TrainerStatus:
        """Start-up (before this launch's first progress line) or a save (announced, no progress line
        since): the phase, and how long since the trainer last showed life: output, or I/O anywhere in
        its process tree, or in start-up CPU time too (activity.py says why not in a save); the save's
        announcement is output."""
        if not trainer.alive:
            return trainer.model_copy(update={"phase": phase})
        self.activity.sample(trainer.pid, now, count_cpu=phase in ("startup", "validating"),   # both compute
                             cpu_window_s=watch.cpu_life_window_s, min_cpu_s=watch.cpu_life_min_s)
        return trainer.model_copy(update={"phase": phase, "seconds_since_activity": self.activity.seconds_idle(now)})


def disk_status(path: Path) -> DiskStatus:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    usage = shutil.disk_usage(probe)
    return DiskStatus(free_bytes=usage.free, total_bytes=usage.total)
