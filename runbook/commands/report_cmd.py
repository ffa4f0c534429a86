"""`runbook report [CONFIG] [--output PATH]`: a Markdown report of the run with a loss-curve PNG.

Written from the run folder alone (journal, trainer logs, incident records, checkpoints), so it
works while the run is alive, after it ended, and for a run that never had an incident.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console

from runbook.config_arg import chosen_config, config_argument, config_option
from runbook.shown_values import field_text

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig
    from runbook.report import RunHistory

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

GOODPUT_EXPLAINED = (
    "Goodput = useful steps / steps computed. *Steps computed* is the sum over launches of the optimizer "
    "steps each launch ran (its last logged step minus the checkpoint step it resumed from, 0 for a launch "
    "from scratch). *Useful steps* is the step the newest launch reached: the steps behind the current "
    "model. The difference is compute redone after preemptions and rollbacks."
)


def _cell(value: object, fmt: str = "{}") -> str:
    if value is None:
        return "-"
    return fmt.format(value).replace("|", "\\|")


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def incident_table(incidents: list[dict]) -> list[str]:
    lines = ["| id | playbook | outcome | step | resumed from | steps lost | tokens lost | recovery s | changes |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in incidents:
        changes = ", ".join(f"{k} {old} → {new}" for k, (old, new) in (r.get("config_changes") or {}).items())
        lines.append("| " + " | ".join([
            _cell(r.get("id")), _cell(r.get("playbook")), _cell(r.get("outcome")), field_text(r, "step_at_failure"),   # "invalid (-5 is negative)"
            field_text(r, "resumed_step"), field_text(r, "steps_lost"), field_text(r, "tokens_lost", "{:,}"),
            _cell(r.get("recovery_seconds"), "{:.1f}"), changes or "-",
        ]) + " |")
    return lines


def launch_table(history: RunHistory) -> list[str]:
    lines = ["| launch | resumed from step | first logged step | last logged step | steps run | log |",
             "| ---: | ---: | ---: | ---: | ---: | --- |"]
    for launch in history.launches:
        first = launch.steps[0] if launch.steps else None
        lines.append(f"| {launch.number} | {launch.start_step or 'scratch'} | {_cell(first)} | {launch.last_step} | "
                     f"{launch.steps_run} | `{launch.log.name}` |")
    return lines


def render_markdown(loaded: LoadedConfig, history: RunHistory, png_name: str) -> str:
    from runbook.report import ABSURD_LOSS, absurd_losses, drawable

    h = history
    absurd = absurd_losses(h)
    phase = h.journal.phase.value
    outcomes: dict[str, int] = {}
    for r in h.incidents:
        outcomes[str(r.get("outcome"))] = outcomes.get(str(r.get("outcome")), 0) + 1
    lost_steps = sum(r.get("steps_lost") or 0 for r in h.incidents)
    lost_tokens = sum(r.get("tokens_lost") or 0 for r in h.incidents)
    val = [v for launch in h.launches for v in launch.val_losses if drawable(v)]
    final_val = next((launch.final_val_loss for launch in reversed(h.launches) if launch.final_val_loss is not None), None)
    last_train = next((launch.losses[-1] for launch in reversed(h.launches) if launch.losses), None)
    kept = ", ".join(f"{c.step}{' (last)' if c.is_last else ''}{'' if c.sealed else ' (not sealed)'}"
                     for c in h.checkpoints) or "none"
    summary = [
        ("run phase", phase + (" (final/ written)" if h.final_exists else "")),
        ("config", f"`{loaded.path}`"),
        ("run folder", f"`{loaded.run_dir}`"),
        ("optimizer steps", f"{h.last_step if h.last_step is not None else 0} of {h.total_steps}"),
        ("launches", str(len(h.launches))),
        ("incidents", f"{len(h.incidents)}" + (" (" + ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) + ")"
                                               if outcomes else "")),
        ("lost to incidents", f"{lost_steps} steps, {lost_tokens:,} tokens (as recorded per incident)"),
        ("goodput", f"{_percent(h.goodput)} ({h.useful_steps} useful steps / {h.computed_steps} steps computed)"),
        ("last train loss", _cell(last_train, "{:.4f}")),
        ("best val loss", _cell(min(val) if val else None, "{:.4f}")),
        ("final val loss", _cell(final_val, "{:.4f}")),
        ("checkpoints kept", kept),
    ]
    now = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    lines = [f"# Run report: {loaded.path.name}", "", f"Generated {now} by `runbook report` from `{loaded.run_dir}`.", "",
             f"![train and val loss over optimizer steps, with incidents]({png_name})", "",
             *([f"{absurd} absurd loss value(s) not drawn (|loss| > {ABSURD_LOSS:g}; an x at the top of the plot "
                "marks each train step)", ""] if absurd else []),
             "## Summary", "", "| | |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in summary), "",
             "## Incidents", ""]
    if h.incidents:
        lines += incident_table(h.incidents)
        lines += ["", "Step: the optimizer step at failure. Steps lost: step at failure minus the checkpoint step the "
                  "trainer resumed from. Recovery s: from detection to the first progress line after the relaunch "
                  "(or to the decision, when nothing was relaunched). `runbook incidents show ID` has the details."]
    else:
        lines.append("No incidents: the run has not needed a recovery.")
    lines += ["", "## Launches", "", *launch_table(h), "", "## Goodput", "", GOODPUT_EXPLAINED, "",
              f"Here: {h.useful_steps} / {h.computed_steps} = {_percent(h.goodput)}.", ""]
    return "\n".join(lines)


def write_report(loaded: LoadedConfig, output: Path) -> tuple[Path, Path, list[str]]:
    """The report and its picture, and the journal lines and records that had to be skipped."""
    from engine.core.durable import atomic_write_text
    from runbook.report import plot_history, read_history

    history = read_history(loaded)
    png = output.with_name(output.stem + "-loss.png")
    title = (f"{loaded.path.name}: loss over {len(history.launches)} launch(es), "
             f"{len(history.incidents)} incident(s), goodput {_percent(history.goodput)}")
    plot_history(history, png, title)
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output, render_markdown(loaded, history, os.path.relpath(png, output.parent)))
    return output, png, history.problems


def report(
    config: Optional[Path] = config_argument(),
    config_opt: Optional[Path] = config_option(),
    output: Path = typer.Option(None, "--output", "-o", help="Markdown file to write (default: <run_dir>/report/report.md)"),
) -> None:
    """Write a Markdown report of the run: loss curve across restarts, incidents, lost compute, goodput."""
    from runbook.commands.common import load_started_run

    from engine.records.journal import JournalUnreadable
    from runbook.exit_codes import ExitCode

    loaded = load_started_run(chosen_config(config, config_opt))
    target = output or loaded.run_dir / "report" / "report.md"
    if target.is_dir():   # `--output some/folder/`: the report goes inside it
        target = target / "report.md"
    try:
        markdown, png, problems = write_report(loaded, target)
    except JournalUnreadable as error:
        err.print(f"error: {error}; nothing was written", markup=False)
        raise typer.Exit(int(ExitCode.NOT_FOUND)) from None
    except OSError as error:
        err.print(f"error: cannot write the report to {target}: {error.strerror or error}", markup=False)
        raise typer.Exit(int(ExitCode.USAGE)) from None
    for problem in problems:
        err.print(f"warning: {problem}", markup=False)
    out.print(f"wrote {markdown}\n  and {png}", markup=False)
