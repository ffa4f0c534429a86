"""A run's history read back from its folder: loss per launch, incidents, checkpoints, goodput.

Shared by `runbook status` (the newest launch) and `runbook report` (all of them, plus the plot).
Everything here only reads: the journal, `logs/trainer-NNN.log[.gz]`, incident records and the
checkpoint folder. Nothing needs the watcher to be running.
"""

from __future__ import annotations

import gzip
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, TypeGuard

from engine.checkpoints import store as ckpts
from engine.checkpoints.last_link import last_link_target
from engine.checkpoints.manifest import has_manifest
from engine.checkpoints.layout import CheckpointLayout
from engine.core.config import LoadedConfig, RunConfig
from engine.core.durable import atomic_write
from engine.core.state import Metrics
from engine.observe.events import FinalValidation, Progress, Resumed, Validation
from engine.observe.log_replay import replay
from engine.observe.throughput import ProgressMeaning, progress_meaning_of
from engine.records.journal import Journal, JournalReplay, rebuild
from engine.trainers import adapter_for
from engine.trainers.base import TrainerAdapter
from runbook.shown_values import checked_incident

LOG_NAME = re.compile(r"^trainer-(\d+)\.log(\.gz)?$")


@dataclass
class LaunchCurve:
    """What one launch of the trainer logged."""

    number: int
    log: Path
    start_step: int = 0                       # the checkpoint step it resumed from (0: from scratch)
    steps: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    val_steps: list[int] = field(default_factory=list)
    val_losses: list[float] = field(default_factory=list)
    final_val_loss: float | None = None
    metrics: Metrics | None = None   # the watch's model of this log (engine/observe/log_replay.py): tokens, tokens/s

    @property
    def last_step(self) -> int:
        return self.steps[-1] if self.steps else self.start_step

    @property
    def steps_run(self) -> int:
        """Optimizer steps this launch computed: from its resume point to the last step it logged."""
        return max(0, self.last_step - self.start_step)


@dataclass
class CheckpointInfo:
    step: int
    sealed: bool          # has runbook's manifest: it passed verification once
    is_last: bool         # `out_dir/last` points here


@dataclass
class RunHistory:
    journal: JournalReplay
    journal_entries: list[dict]
    launches: list[LaunchCurve]
    incidents: list[dict]
    checkpoints: list[CheckpointInfo]
    final_exists: bool
    total_steps: int
    meaning: ProgressMeaning   # what one progress line stands for (the trainer adapter's word): tokens, tokens/s, ETA
    problems: list[str] = field(default_factory=list)   # skipped journal lines and records: file and reason

    @property
    def useful_steps(self) -> int:
        """Steps on the path to the current model: where the newest launch got to."""
        return self.launches[-1].last_step if self.launches else 0

    @property
    def computed_steps(self) -> int:
        return sum(launch.steps_run for launch in self.launches)

    @property
    def goodput(self) -> float | None:
        return self.useful_steps / self.computed_steps if self.computed_steps else None

    @property
    def last_step(self) -> int | None:
        return self.launches[-1].last_step if self.launches else None


def total_steps(config: RunConfig) -> int:
    """Optimizer steps the run is planned for: max_tokens / (batch_size x block_size)."""
    return config.max_tokens // (config.batch_size * config.model.block_size)


def trainer_logs(run_dir: Path) -> list[tuple[int, Path]]:
    """(launch number, path) of every trainer log, in launch order; upkeep may have gzipped old ones."""
    found = {}
    for path in (run_dir / "logs").glob("trainer-*.log*"):
        m = LOG_NAME.match(path.name)
        if m and (int(m.group(1)) not in found or not m.group(2)):  # prefer the plain file if both exist
            found[int(m.group(1))] = path
    return sorted(found.items())


def read_log_lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
            return fh.read().splitlines()
    except (OSError, EOFError):   # a gzip being written, or a log removed meanwhile
        return []


def parse_launch(number: int, path: Path, start_step: int | None, adapter: TrainerAdapter,
                 meaning: ProgressMeaning) -> LaunchCurve:
    """One launch's log read by the watch's own parser and tracker (engine/observe/log_replay.py): its curve, and
    the figures the watch would show for it."""
    curve = LaunchCurve(number=number, log=path, start_step=start_step or 0)
    tracker = replay(read_log_lines(path), adapter, meaning)
    for event, _ in tracker.events:
        if isinstance(event, Progress):
            if event.step_known:   # a count of HF's logged dicts is no step to draw a curve over
                curve.steps.append(event.step)
                curve.losses.append(event.loss)
        elif isinstance(event, Validation):
            # validation is printed right after the progress line of that step (as observer.py assumes)
            curve.val_steps.append(curve.last_step)
            curve.val_losses.append(event.val_loss)
        elif isinstance(event, FinalValidation):
            curve.final_val_loss = event.val_loss
        elif isinstance(event, Resumed) and start_step is None and (step := adapter.layout.step_in_path(event.path)):
            curve.start_step = step
    curve.metrics = tracker.metrics()
    return curve


def launch_starts(entries: list[dict], layout: CheckpointLayout) -> dict[int, int]:
    """Launch number -> the step of the checkpoint it resumed from (a rescaled copy keeps the step in its name)."""
    starts = {}
    for e in entries:
        if e.get("kind") == "launch":
            starts[e["launch"]] = layout.step_in_path(e.get("resume_from") or "") or 0
    return starts


def read_incident_records(run_dir: Path) -> tuple[list[dict], list[str]]:
    """Valid incident records (as JSON, for formatting), oldest first, and one sentence per record skipped."""
    from engine.records.incident_store import IncidentsUnreadable, IncidentStore

    try:
        incidents, problems = IncidentStore(run_dir).read_all()
    except IncidentsUnreadable as error:
        return [], [str(error)]
    return [incident.to_json() for incident in incidents], problems


def read_incidents(run_dir: Path) -> list[dict]:
    """Valid incident records, oldest first (a bad file is skipped: this is a summary)."""
    return read_incident_records(run_dir)[0]


def _resolved(path: Path) -> Path | None:
    try:
        return path.resolve()
    except (OSError, RuntimeError):   # a `last` link in a loop (pointing at itself)
        return None


def read_checkpoints(out_dir: Path, layout: CheckpointLayout) -> list[CheckpointInfo]:
    last = last_link_target(out_dir)
    last = _resolved(last) if last is not None else None
    return [CheckpointInfo(c.step, has_manifest(c), last is not None and last == _resolved(c.path))
            for c in ckpts.list_checkpoints(out_dir, layout)]


def read_history(loaded: LoadedConfig, only_newest_launch: bool = False, with_incidents: bool = True) -> RunHistory:
    """Raises JournalUnreadable when the journal file itself cannot be read; bad lines are only skipped.
    with_incidents=False: no incident record is read (`status` reads the store's summary instead)."""
    run_dir = loaded.run_dir
    journal = Journal(loaded.folder.journal)
    entries = journal.entries()
    adapter = adapter_for(loaded.config.trainer.kind)
    starts = launch_starts(entries, adapter.layout)
    logs = trainer_logs(run_dir)
    if only_newest_launch:
        logs = logs[-1:]
    meaning = progress_meaning_of(adapter, loaded.config)
    launches = [parse_launch(n, path, starts.get(n), adapter, meaning) for n, path in logs]
    incidents, bad_records = read_incident_records(run_dir) if with_incidents else ([], [])
    checked = [checked_incident(record) for record in incidents]   # a step of -5 is shown as unknown, and said
    incidents = [record for record, _ in checked]
    bad_records += [problem for _, problems in checked for problem in problems]
    return RunHistory(
        journal=rebuild(entries), journal_entries=entries, launches=launches, incidents=incidents,
        checkpoints=read_checkpoints(loaded.out_dir, adapter.layout),
        final_exists=ckpts.final_exists(loaded.out_dir, adapter.layout),
        total_steps=total_steps(loaded.config), meaning=meaning, problems=[str(p) for p in journal.problems] + bad_records,
    )


def finite(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


# No loss a run means is this big; +-1e308 made the plot's axis a singular transform (LinAlgError: no report).
ABSURD_LOSS = 1e15


def drawable(value: float | None) -> TypeGuard[float]:
    return value is not None and math.isfinite(value) and abs(value) <= ABSURD_LOSS


def absurd_losses(history: RunHistory) -> int:
    """PURE. Finite loss values too big to draw (train, val and final val), left out of the plot."""
    values = [v for launch in history.launches for v in (*launch.losses, *launch.val_losses, launch.final_val_loss)]
    return sum(1 for v in values if v is not None and math.isfinite(v) and not drawable(v))


def duration(seconds: float | None) -> str:
    """A short human duration: "42 s", "3 min 05 s", "2 h 10 min"."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = int(max(0, seconds))
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 5400:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


# --- the picture -------------------------------------------------------------------------------
LAUNCH_COLOURS = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]
OUTCOME_COLOURS = {"recovered": "#d62728", "escalated": "#000000", "failed": "#000000", "open": "#ff7f0e"}


def _short(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def plot_history(history: RunHistory, png: Path, title: str) -> Path:
    """Loss over optimizer steps, one line per launch; incidents, rollbacks, config changes, checkpoints."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file is all we want, also on a headless box
    import matplotlib.pyplot as plt
    from matplotlib.transforms import blended_transform_factory

    fig, ax = plt.subplots(figsize=(11, 6), dpi=110)
    top = blended_transform_factory(ax.transData, ax.transAxes)   # x in steps, y in 0..1 of the axes
    all_losses = [loss for launch in history.launches for loss in launch.losses if drawable(loss)]
    val_labelled = False
    for i, launch in enumerate(history.launches):
        colour = LAUNCH_COLOURS[i % len(LAUNCH_COLOURS)]
        origin = f"from step {launch.start_step}" if launch.start_step else "from scratch"
        points = [(s, v) for s, v in zip(launch.steps, launch.losses) if drawable(v)]
        # Steps past the point the next launch resumed from were thrown away: draw them dashed, on top.
        cut = history.launches[i + 1].start_step if i + 1 < len(history.launches) else None
        kept = [(s, v) for s, v in points if cut is None or s <= cut]
        lost = [(s, v) for s, v in points if cut is not None and s >= cut]
        if kept:
            ax.plot(*zip(*kept), color=colour, linewidth=1.6, label=f"train loss, launch {launch.number} ({origin})")
        if len(lost) > 1:
            ax.plot(*zip(*lost), color=colour, linewidth=2.2, linestyle=(0, (2, 1.5)), zorder=4,
                    label=f"launch {launch.number}: steps lost (redone by the next launch)")
        bad = [s for s, v in zip(launch.steps, launch.losses) if not drawable(v)]
        if bad:
            ax.plot(bad, [0.97] * len(bad), "x", color="#d62728", markersize=9, transform=top,
                    label=f"non-finite or absurd loss (nan/inf, |loss| > {ABSURD_LOSS:g})")
        val = [(s, v) for s, v in zip(launch.val_steps, launch.val_losses) if drawable(v)]
        if val:
            ax.plot(*zip(*val), "D", color=colour, markersize=6, markeredgecolor="black",
                    zorder=5, label=None if val_labelled else "val loss (colour of its launch)")
            val_labelled = True
        if drawable(launch.final_val_loss):
            ax.plot([launch.last_step], [launch.final_val_loss], "*", color=colour, markersize=14,
                    markeredgecolor="black", zorder=5, label="final val loss")
    if all_losses and max(all_losses) > 20 * min(all_losses) > 0:
        ax.set_yscale("log")  # a divergence to hundreds would flatten the healthy part of the curve

    ymin, ymax = ax.get_ylim()
    for n, record in enumerate(history.incidents):
        step = record.get("step_at_failure")
        if step is None:
            continue
        colour = OUTCOME_COLOURS.get(str(record.get("outcome")), "#d62728")
        ax.axvline(step, color=colour, linestyle="--", linewidth=1.2)
        ax.text(step, 0.985 - 0.13 * (n % 3), f" {record['id']}\n {record.get('playbook')}\n {record.get('outcome')}",
                transform=top, va="top", ha="left", fontsize=8.5, color=colour,
                bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": colour, "alpha": 0.85})
        resumed = record.get("resumed_step")
        if resumed is not None and resumed < step:
            # the jump back: the trainer continued from an earlier checkpoint, these steps are recomputed
            y = 0.08 + 0.07 * (n % 3)
            ax.annotate("", xy=(resumed, y), xytext=(step, y), xycoords=top, textcoords=top,
                        arrowprops={"arrowstyle": "-|>", "color": colour, "linewidth": 1.8})
            ax.text((resumed + step) / 2, y + 0.015, f"resumed at {resumed}: {step - resumed} steps lost", transform=top,
                    ha="center", va="bottom", fontsize=8, color=colour,
                    zorder=6, bbox={"boxstyle": "round,pad=0.1", "facecolor": "white", "edgecolor": "none"})
        changes = record.get("config_changes") or {}
        if changes:
            text = "\n".join(f"{key}: {_short(old)} → {_short(new)}" for key, (old, new) in changes.items())
            ax.text(step, 0.62, " " + text.replace("\n", "\n "), transform=top, fontsize=8.5, va="top",
                    ha="left", color="#444444", bbox={"boxstyle": "round,pad=0.2", "facecolor": "#fff6d5",
                                                      "edgecolor": "#c9a227"})
    ax.set_ylim(ymin, ymax)

    kept_steps = [c.step for c in history.checkpoints if not c.is_last]
    if kept_steps:
        ax.plot(kept_steps, [0.0] * len(kept_steps), "|", color="#888888", markersize=18, markeredgewidth=2.2, transform=top,
                clip_on=False, label="checkpoint kept")
    last = [c.step for c in history.checkpoints if c.is_last]
    if last:
        ax.plot(last, [0.0], "|", color="#000000", markersize=22, markeredgewidth=3, transform=top, clip_on=False,
                label="checkpoint `last` points to")
    ax.plot([], [], "--", color=OUTCOME_COLOURS["recovered"], label="incident (step at failure)")
    if history.total_steps:
        ax.axvline(history.total_steps, color="#999999", linestyle=":", linewidth=1.2)
        ax.text(history.total_steps, 0.5, "planned end ", transform=top, rotation=90, ha="right", va="center",
                fontsize=8.5, color="#777777")
        ax.set_xlim(0, max(history.total_steps, *(launch.last_step for launch in history.launches), 1) * 1.02)
    ax.set_xlabel("optimizer step", fontsize=11)
    ax.set_ylabel("loss (cross-entropy" + (", log scale)" if ax.get_yscale() == "log" else ")"), fontsize=11)
    ax.set_title(title, fontsize=13)
    ax.grid(True, alpha=0.3)
    # Outside the axes: incident labels and annotations sit anywhere along the curve.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    png.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(png, lambda f: fig.savefig(f, format="png", bbox_inches="tight"))
    plt.close(fig)
    return png
