"""The `runbook` command line: one function per command, an explicit table kept in sync by a test."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from engine.core.yaml_source import SourceError
from runbook.config_arg import chosen_config, config_argument, config_option
from runbook.exit_codes import ExitCode
from runbook.terminal import sane_terminal

sane_terminal()   # before any Console is made: a sane width whatever COLUMNS says, output an ASCII stdout can take
app = typer.Typer(add_completion=True, no_args_is_help=True, help="Declarative runbook automation for LLM pretraining.")
err = Console(stderr=True, highlight=False, soft_wrap=True)


@app.callback()
def _root() -> None:
    """runbook: supervise a pretraining run and recover it by playbooks written in YAML."""


@app.command()
def watch(
    config: Optional[Path] = config_argument(),
    config_opt: Optional[Path] = config_option(),
    dry_run: bool = typer.Option(False, "--dry-run", help="supervise, but only print what a recovery would do"),
    accept_data_change: bool = typer.Option(False, help="resume although the training data changed"),
    quiet: bool = typer.Option(False, "--quiet", help="only state changes and incidents"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per event"),
    debug: bool = typer.Option(False, "--debug", help="show tracebacks"),
) -> None:
    """Train and supervise: launch the trainer, watch it, recover from failures by the playbooks."""
    from runbook.watch_command import run_watch

    code = run_watch(chosen_config(config, config_opt), dry_run=dry_run, accept_data_change=accept_data_change, quiet=quiet,
                     as_json=as_json, debug=debug)
    raise typer.Exit(int(code))


# --- commands that live in their own modules: an explicit table (tests/unit/test_cli.py keeps it in sync) ---
from runbook.commands.check_cmd import check as check_command  # noqa: E402
from runbook.commands.drill_cmd import drill as drill_command  # noqa: E402
from runbook.commands.incidents_cmd import incidents_app  # noqa: E402
from runbook.commands.init_cmd import init as init_command  # noqa: E402
from runbook.commands.ledger_cmd import ledger as ledger_command  # noqa: E402
from runbook.commands.notify_cmd import notify as notify_command  # noqa: E402
from runbook.commands.playbooks_cmd import playbooks_app  # noqa: E402
from runbook.commands.replay_cmd import replay as replay_command  # noqa: E402
from runbook.commands.report_cmd import report as report_command  # noqa: E402
from runbook.commands.scan_data_cmd import scan_data as scan_data_command  # noqa: E402
from runbook.commands.slurm_cmd import slurm_app  # noqa: E402
from runbook.commands.status_cmd import status as status_command  # noqa: E402
from runbook.commands.triage_cmd import triage as triage_command  # noqa: E402
from runbook.commands.verify_cmd import verify as verify_command  # noqa: E402

app.add_typer(playbooks_app, name="playbooks")
app.add_typer(incidents_app, name="incidents")
app.add_typer(slurm_app, name="slurm")
app.command("init")(init_command)
app.command("replay")(replay_command)
app.command("scan-data")(scan_data_command)
app.command("verify")(verify_command)
app.command("status")(status_command)
app.command("report")(report_command)
app.command("drill")(drill_command)
app.command("notify")(notify_command)
app.command("check")(check_command)
app.command("ledger")(ledger_command)
app.command("triage")(triage_command)


def main() -> None:
    try:
        app()
    except SourceError as error:
        err.print("\n".join(error.messages), highlight=False, markup=False)
        sys.exit(int(ExitCode.BAD_CONFIG))


if __name__ == "__main__":
    main()
