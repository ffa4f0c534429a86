"""`runbook replay incident-N | --all [CONFIG]`: re-decide recorded incidents against today's playbooks.

Dry-run by default: it reads the config, the playbooks and the records and writes nothing, runs
nothing. Exit 0 when every decision is unchanged, 1 when one changed, 9 when a record is unknown or
unreadable, 3 when the config or a playbook is invalid. `--execute` (one incident only) performs the
recovery again for real in a new run folder; see runbook/commands/replay_execute.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.text import Text

from runbook.commands.incidents_cmd import (
    RecordProblem, err, open_store, out, read_all, read_record, report,
)
from runbook.config_arg import chosen_config, config_argument, config_option
from runbook.exit_codes import ExitCode
from engine.core.yaml_source import SourceError

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig
    from engine.language.playbook import Playbook
    from engine.language.replay import ReplayResult


def replay(
    incident_id: Optional[str] = typer.Argument(None, help="incident-N (or use --all)"),
    config: Optional[Path] = config_argument(),
    all_incidents: bool = typer.Option(False, "--all", help="replay every recorded incident (a regression check)"),
    config_opt: Optional[Path] = config_option(),
    playbooks: Optional[list[Path]] = typer.Option(
        None, "--playbooks", help="playbook file or folder to use instead of the config's (repeatable)"),
    config_now: bool = typer.Option(
        False, "--config-now", help="match against today's run config instead of the one the incident saw"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per incident"),
    execute: bool = typer.Option(
        False, "--execute", help="perform the recovery again for real, from the recorded checkpoint, in a NEW run folder"),
    accept_data_change: bool = typer.Option(
        False, "--accept-data-change", help="with --execute: resume although the training data changed since the incident"),
) -> None:
    """Re-evaluate recorded incidents against today's playbooks and show what would differ (dry-run)."""
    if incident_id and Path(incident_id).suffix in (".yaml", ".yml") and config is None:   # `replay --all CONFIG`
        config, incident_id = Path(incident_id), None
    config = chosen_config(config, config_opt)
    if (incident_id is None) == (not all_incidents):
        err.print(Text("error: give one incident id (incident-N) or --all, not both and not neither"))
        raise typer.Exit(int(ExitCode.USAGE))
    if execute and all_incidents:
        err.print(Text("error: --execute replays one incident at a time; give its id instead of --all"))
        raise typer.Exit(int(ExitCode.USAGE))
    try:
        loaded, store = open_store(config)
        chosen = [read_record(store, incident_id)] if incident_id else None
    except RecordProblem as record_problem:
        raise typer.Exit(int(report(record_problem)))
    try:
        from engine.language.playbook_set import load_set

        # --playbooks names exactly the set to replay with; without it, the run's own (shipped + project).
        playbook_paths = [p.resolve() for p in playbooks] if playbooks else loaded.playbook_paths
        shipped = not playbooks and loaded.config.playbooks.shipped
        today = load_set(playbook_paths, shipped)[0]
    except SourceError as error:
        err.print(Text("\n".join(error.messages)))
        raise typer.Exit(int(ExitCode.BAD_CONFIG))

    everything, unreadable = read_all(store)
    if incident_id:  # unreadable *other* records only thin the rebuilt attempt history: warn
        for problem in unreadable.values():
            err.print(Text(f"warning: {problem}"))
        unreadable = {}
    problems = list(unreadable.values())
    targets = chosen if chosen is not None else everything
    results, code = [], ExitCode.OK
    for record in targets:
        result = _replay_one(record, today, loaded, everything, config_now)
        if isinstance(result, str):
            problems.append(result)
            continue
        results.append(result)
        _print(result, as_json, brief=all_incidents and not result.changed)
    for problem in problems:
        err.print(Text("error: " + problem))
    if all_incidents and not as_json:
        changed = sum(r.changed for r in results)
        out.print(Text(f"{len(results)} incident(s) replayed: {len(results) - changed} unchanged, {changed} changed"
                       + (f", {len(problems)} unreadable" if problems else ""),
                       style="red" if changed or problems else "green"))
    if problems:
        code = ExitCode.NOT_FOUND
    elif any(r.changed for r in results):
        code = ExitCode.NO_MATCH
    if execute and not problems:
        from runbook.commands.replay_execute import execute_replay

        assert chosen is not None   # --execute takes one incident id: with --all it was refused above
        code = execute_replay(chosen[0], loaded, playbook_paths, accept_data_change=accept_data_change, shipped=shipped)
    raise typer.Exit(int(code))


def _replay_one(record: dict, playbooks: list[Playbook], loaded: LoadedConfig, everything: list[dict],
                config_now: bool) -> ReplayResult | str:
    """A ReplayResult, or one sentence saying why this record cannot be replayed."""
    from engine.language.replay import RecordError, recorded_config, replay as replay_record

    config, note = (loaded.config, None) if config_now else recorded_config(record, loaded.config)
    try:
        result = replay_record(record, playbooks, config, earlier=everything)
    except RecordError as error:
        return f"{error}; nothing was changed"
    if note:
        from dataclasses import replace

        result = replace(result, notes=result.notes + (note,))
    return result


def _print(result: ReplayResult, as_json: bool, brief: bool = False) -> None:
    if as_json:
        typer.echo(json.dumps(result.to_dict()))
        return
    lines = result.render().splitlines()[:1 if brief else None]  # --all: details only where changed
    out.print(Text(lines[0], style="bold red" if result.changed else "bold green"))
    for line in lines[1:]:
        style = "red" if line.lstrip().startswith("- ") else "green" if line.lstrip().startswith("+ ") else ""
        out.print(Text(line, style=style))
