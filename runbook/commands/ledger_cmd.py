"""`runbook ledger [RUN_DIR ...]`: the team's failure ledger over several runs, per failure class and per
signature (count, detection and recovery times, steps, tokens and device-hours lost, escalations, the
playbook that handled it). Prints the Markdown and writes ledger.md, ledger.json and, when there is
something to draw, ledger.png into --output.

A RUN_DIR is a run folder (one with incidents/) or any folder above run folders (a team's share):
they are found by a bounded walk. Without one, the run folder of the run config (-c, default
configs/run_config.yaml). Exit 0; 9 when no run folder or no readable record was found; 3 a bad config.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.text import Text

from engine.core.text_safety import for_display
from runbook.exit_codes import ExitCode

if TYPE_CHECKING:
    from engine.records.failure_ledger import LedgerEntry, LedgerRow

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _default_run_dir(config: Path) -> Path:
    from engine.trainers.run_config import load_config

    return load_config(config).run_dir   # a SourceError is runbook.cli's: one sentence, exit 3


def _label(run_dir: Path, roots: list[Path]) -> str:
    for root in roots:
        try:
            return str(root / run_dir.relative_to(root.resolve()))   # as the user named it, so two runs differ
        except ValueError:
            continue
    return str(run_dir)


def shown(entry: LedgerEntry) -> LedgerEntry:
    """PURE. A ledger entry whose texts (a signature is a log line, masked) can neither act on a terminal
    nor carry a secret: the Markdown, the JSON and the chart are all made from these."""
    texts = {f.name: for_display(value) for f in dataclasses.fields(entry) if isinstance(value := getattr(entry, f.name), str)}
    # mypy checks the str values against every field's type; the names are only those holding a str
    return dataclasses.replace(entry, **texts)   # type: ignore[arg-type]


def write_png(ledger: dict[str, list[LedgerRow]], path: Path) -> bool:
    """Incidents and steps lost per failure class, side by side; False when there is nothing to draw."""
    rows = ledger["by_class"]
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    names = [r.key for r in rows][::-1]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 1.2 + 0.45 * len(rows)), sharey=True)
    left.barh(names, [r.count - r.escalations for r in rows][::-1], label="recovered", color="#4c9a5b")
    left.barh(names, [r.escalations for r in rows][::-1], left=[r.count - r.escalations for r in rows][::-1],
              label="escalated", color="#c8553d")
    left.set_xlabel("incidents")
    left.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    right.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    left.legend(loc="lower right", fontsize=8)
    right.barh(names, [r.steps_lost for r in rows][::-1], color="#5b6c9a")
    right.set_xlabel("optimizer steps lost")
    fig.suptitle("Failure ledger: per failure class")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def ledger(
    run_dirs: Optional[list[Path]] = typer.Argument(None, metavar="[RUN_DIR]...",
                                                    help="run folders, or folders above them (default: the config's run folder)"),
    config: Path = typer.Option(Path("configs/run_config.yaml"), "--config", "-c",
                                help="run config whose run folder to read when no RUN_DIR is given"),
    output: Path = typer.Option(Path("ledger"), "--output", "-o", help="folder for ledger.md, ledger.json, ledger.png"),
    as_json: bool = typer.Option(False, "--json", help="print the JSON instead of the Markdown"),
) -> None:
    """The failure ledger across runs: per failure class and signature, what failures cost."""
    from engine.core.durable import atomic_write_text
    from engine.records.failure_ledger import build_ledger, to_json, to_markdown
    from engine.records.failure_ledger_read import ledger_entries, run_folders

    roots = list(run_dirs) if run_dirs else [_default_run_dir(config)]
    folders, problems = run_folders(roots)
    problems = [for_display(problem) for problem in problems]   # they quote folder names and file contents
    if not folders:
        for problem in problems:
            err.print(Text(f"error: {problem}"))
        raise typer.Exit(int(ExitCode.NOT_FOUND))
    entries, labels = [], []
    for folder in folders:
        label = _label(folder, roots)
        found, skipped = ledger_entries(folder, label)
        entries += [shown(entry) for entry in found]
        labels.append(for_display(label))
        problems += [for_display(problem) for problem in skipped]
    for problem in problems:
        err.print(Text(f"warning: {problem}"))
    table = build_ledger(entries)
    markdown, data = to_markdown(table, labels, problems), to_json(table, labels, problems)
    try:
        output.mkdir(parents=True, exist_ok=True)
        atomic_write_text(output / "ledger.md", markdown)
        atomic_write_text(output / "ledger.json", data)
        drawn = write_png(table, output / "ledger.png")
    except OSError as error:
        err.print(Text(for_display(f"error: cannot write the ledger into {output}: {error.strerror or error}")))
        raise typer.Exit(int(ExitCode.BAD_CONFIG))
    if as_json:
        out.print(Text(data, end=""))
    else:
        out.print(Text(markdown))
    err.print(Text(for_display(f"wrote {output / 'ledger.md'}, {output / 'ledger.json'}" + (f", {output / 'ledger.png'}" if drawn else ""))))
    if not entries and problems:
        raise typer.Exit(int(ExitCode.NOT_FOUND))
