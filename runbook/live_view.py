"""What `runbook watch` shows on a terminal: a rich Live panel, redrawn a few times a second.

A subscriber of the watch loop's event bus (engine/core/events.py), as console.PlainReporter is.
Events arrive on the supervisor's (and upkeep's) threads while rich redraws on its own: every payload
is a frozen copy (an incident is an IncidentView), so `render()` never reads the supervisor's mutable
incident record. Events that are history (transitions,
incidents, actions, warnings) are also printed as lines above the panel, worded as PlainReporter
words them, so the scrollback tells the story when the panel is gone.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import deque

from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from engine.core.events import ActionDone, IncidentClosed, IncidentOpened, Launch, Observed, Transition, WatchEvent
from engine.core.config import LoadedConfig
from engine.core.state import Metrics, RunPhase, StateSnapshot
from runbook.console import PlainReporter
from runbook.report import duration, total_steps
from runbook.shown_values import step_problem, step_text

ETA_WINDOW_S = 60.0          # steps/s over the last minute: reacts to a slowdown, ignores one slow step
STATE_STYLES = {"starting": "cyan", "running": "green", "incident": "bold red", "recovering": "bold yellow",
                "completed": "bold green", "escalated": "bold red", "stopped": "yellow"}


class LiveView:
    def __init__(self, loaded: LoadedConfig, console: Console | None = None, refresh_per_second: float = 4):
        self.console = console or Console()
        self.title = str(loaded.path.name)
        self.total_steps = total_steps(loaded.config)
        self.refresh_per_second = refresh_per_second
        self.lines = PlainReporter(quiet=True)      # its wording, our printing
        self.started = time.time()
        self.state = RunPhase.STARTING
        self.reason = ""
        self.snapshot: StateSnapshot | None = None
        self.samples: deque[tuple[float, int]] = deque()
        self.incident: dict | None = None           # a copy: id, playbook, step, outcome, doing, result
        self.env: dict[str, str] = {}               # what remedies added to the current launch's environment
        self._live: Live | None = None

    # --- lifecycle: `with view:` around Supervisor.run() ---------------------------------------
    def __enter__(self) -> "LiveView":
        self._live = Live(get_renderable=self.render, console=self.console,
                          refresh_per_second=self.refresh_per_second, transient=False)
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    # --- the event sink --------------------------------------------------------------------------
    def __call__(self, event: WatchEvent) -> None:
        if isinstance(event, Observed):
            self._observe(event.snapshot)
        elif isinstance(event, Transition):
            self.state, self.reason = event.state, event.reason
            i = self.incident
            if i is not None and i["outcome"] == "open" and self.state not in (RunPhase.INCIDENT, RunPhase.RECOVERING):
                # The supervisor closes the incident here but reports it only after the first new progress line.
                self.incident = {**i, "outcome": "recovered" if self.state == RunPhase.RUNNING else self.state.value}
        elif isinstance(event, (IncidentOpened, ActionDone, IncidentClosed)):
            self._incident(event)
        elif isinstance(event, Launch):
            self.env = dict(event.env)
        if not isinstance(event, Observed):
            line = self.lines.format(event)
            if line is not None:
                self.console.print(Text(f"{dt.datetime.now():%H:%M:%S} {line}"))

    def _observe(self, snapshot: StateSnapshot) -> None:
        step = snapshot.metrics.step
        if step is not None:
            if self.samples and step < self.samples[-1][1]:
                self.samples.clear()            # a rollback: the old rate says nothing about the new launch
            if not self.samples or step != self.samples[-1][1]:
                self.samples.append((snapshot.time, step))
            while len(self.samples) > 2 and snapshot.time - self.samples[0][0] > ETA_WINDOW_S:
                self.samples.popleft()
        self.snapshot = snapshot

    def _incident(self, event: IncidentOpened | ActionDone | IncidentClosed) -> None:
        i = event.incident
        result = event.result if isinstance(event, ActionDone) else None
        self.incident = {
            "id": i.id, "playbook": i.playbook, "step": i.step_at_failure, "outcome": i.outcome, "doing": i.doing,
            "closed": isinstance(event, IncidentClosed),
            "last_action": f"{result.verb}: {'ok' if result.ok else 'FAILED'} - {result.summary}" if result else None,
            "steps_lost": i.steps_lost, "recovery_seconds": i.recovery_seconds,
        }

    # --- the panel -------------------------------------------------------------------------------
    def eta_seconds(self) -> float | None:
        if len(self.samples) < 2 or self.snapshot is None or self.snapshot.metrics.step is None:
            return None
        (t0, s0), (t1, s1) = self.samples[0], self.samples[-1]
        if t1 <= t0 or s1 <= s0:
            return None
        return max(0, self.total_steps - self.snapshot.metrics.step) / ((s1 - s0) / (t1 - t0))

    def render(self) -> Panel:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column()
        state = self.state.value
        grid.add_row("state", Text.assemble((state, STATE_STYLES.get(state, "")), f"  {self.reason}"))
        snap = self.snapshot
        if snap is None:
            grid.add_row("step", Text("waiting for the first observation", style="dim"))
        else:
            self._metric_rows(grid, snap)
        grid.add_row("incident", self._incident_text())
        if self.env:   # a remedy's variables in force: a diagnosis costs throughput, a transport change bandwidth
            grid.add_row("env", Text(", ".join(f"{k}={v}" for k, v in sorted(self.env.items())), style="yellow"))
        elapsed = duration(time.time() - self.started)
        return Panel(grid, title=f"runbook watch · {self.title}", subtitle=f"watching for {elapsed} · Ctrl-C stops",
                     border_style=STATE_STYLES.get(state, "white").replace("bold ", ""), expand=False)

    def _metric_rows(self, grid: Table, snap: StateSnapshot) -> None:
        m, total = snap.metrics, self.total_steps
        step = m.step or 0
        bar = ProgressBar(total=max(total, 1), completed=min(step, total), width=30)
        pct = f"{100 * step / total:.0f}%" if total else "-"
        eta = self.eta_seconds()
        counter = Text(f"{step} / {total}  {pct}  ETA {duration(eta) if eta is not None else '-'}")
        grid_row = Table.grid(padding=(0, 1))
        grid_row.add_row(bar, counter)
        row: Table | Text = grid_row
        if m.step is None:
            row = Text("no progress line yet", style="dim")
        elif problem := step_problem(m.step):   # never a bar at step -5
            row = Text(f"invalid ({problem})", style="red")
        grid.add_row("step", row)
        loss = "-" if m.loss is None else f"{m.loss:.4f}"
        val = "-" if m.val_loss is None else f"{m.val_loss:.4f}"
        best = f" (best {m.best_val_loss:.4f} at step {m.best_val_step})" if m.best_val_loss is not None else ""
        grid.add_row("loss", f"train {loss}   val {val}{best}")
        grid.add_row("speed", self._speed_text(m))
        since, timeout = snap.seconds_since_progress, snap.hang_timeout_s
        style = "red" if since > timeout else "yellow" if since > timeout / 2 else ""
        grid.add_row("progress", Text(f"last progress {since:.1f} s ago (hang timeout {timeout:.0f} s)", style=style))
        disk = snap.disk
        grid.add_row("disk", Text(f"{disk.free_bytes / 1e9:,.1f} GB free ({disk.free_percent:.0f}%)",
                                  style="red" if disk.free_percent < 5 else ""))
        c = snap.checkpoints
        ckpt = Text(f"step {c.newest_verified_step} verified" if c.newest_verified_step is not None else "none verified yet")
        ckpt.append(f"  ({c.count} on disk)")
        if c.corrupt_steps:
            ckpt.append(f"  corrupt: {', '.join(map(str, c.corrupt_steps))}", style="red")
        grid.add_row("checkpoint", ckpt)
        t = snap.trainer
        alive = "alive" if t.alive else f"exited {t.exit_code}" if t.exit_code is not None else "not running"
        grid.add_row("trainer", f"{alive}, pid {t.pid}, launch {t.launches}" + ("  STOPPED (SIGSTOP)" if t.stopped else ""))

    @staticmethod
    def _speed_text(m: Metrics) -> Text:
        if m.tokens_per_sec is None:
            return Text("-", style="dim")
        text = Text(f"{m.tokens_per_sec:,.0f} tok/s")
        if m.baseline_tokens_per_sec:
            ratio = m.tokens_per_sec / m.baseline_tokens_per_sec
            text.append(f"  ({ratio:.0%} of baseline {m.baseline_tokens_per_sec:,.0f})",
                        style="red" if ratio < 0.6 else "")
        else:
            text.append("  (baseline: measuring)", style="dim")
        return text

    def _incident_text(self) -> Text:
        i = self.incident
        if i is None:
            return Text("none", style="dim")
        head = Text(f"{i['id']} {i['playbook']} at step {step_text(i['step'])}: ", style="bold")
        if i["outcome"] == "open":
            head.append("under way", style="bold yellow")
            if i["doing"]:
                head.append(f"\nnow: {i['doing']}")
            if i["last_action"]:
                head.append(f"\ndone: {i['last_action']}", style="dim")
        elif not i["closed"]:
            head.append(f"{i['outcome']}; waiting for the first progress line", style="yellow")
        else:
            lost = "" if i["steps_lost"] is None else f", {i['steps_lost']} steps lost" \
                if not (why := step_problem(i["steps_lost"])) else f", steps lost invalid ({why})"
            recovery = f" in {i['recovery_seconds']:.1f} s" if i["recovery_seconds"] is not None else ""
            head.append(f"{i['outcome']}{recovery}{lost}", style="green" if i["outcome"] == "recovered" else "red")
        return head
