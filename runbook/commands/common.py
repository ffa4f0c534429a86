"""What several commands share: loading the run config of a run that has started, with one-sentence errors."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer
from rich.console import Console

from runbook.exit_codes import ExitCode
from engine.core.yaml_source import SourceError

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig

err = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(code: ExitCode, message: str) -> NoReturn:
    """One sentence on stderr and the command's distinct exit code."""
    err.print(f"[bold red]error:[/] {message}", soft_wrap=True)
    raise typer.Exit(int(code))


def load_started_run(config: Path, launched_is_started: bool = False) -> LoadedConfig:
    """The LoadedConfig of a run that has a journal (or, with launched_is_started, a launch record: a
    watcher killed as it launched leaves a trainer before any journal line); exit 3 with one sentence
    otherwise."""
    from engine.trainers.run_config import load_config

    try:
        loaded = load_config(config)
    except SourceError as error:
        err.print("\n".join(error.messages), markup=False)
        raise typer.Exit(int(ExitCode.BAD_CONFIG)) from None
    journal = loaded.folder.journal
    if journal.exists() and not journal.is_file():
        err.print(f"error: cannot read the journal {journal}: it is not a file; nothing was changed", markup=False)
        raise typer.Exit(int(ExitCode.NOT_FOUND))
    if not journal.is_file() and not (launched_is_started and loaded.folder.launches.is_dir()):
        err.print(f"error: no run has started in {loaded.run_dir} yet (no journal.jsonl); "
                  f"start it with `runbook watch {config}`", markup=False)
        raise typer.Exit(int(ExitCode.BAD_CONFIG))
    return loaded
