"""`runbook incidents` (a table of the run's incident records) and `runbook incidents show incident-N`.

Read-only: records are read, never repaired or rewritten. A record that cannot be read is named
with its file and exit code 9 (NOT_FOUND); the other records are still shown.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich import box
from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from engine.core.text_safety import for_display, redact, redact_tree
from engine.records.run_log_entry import skipped_words
from engine.core.yaml_source import SourceError
from runbook.config_arg import ConfigGroup, chosen_config, config_argument, config_option
from runbook.exit_codes import ExitCode
from runbook.shown_values import INCIDENT_COUNTS, INCIDENT_STEPS, checked_incident, field_text

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig
    from engine.records.incident_store import IncidentStore

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

incidents_app = typer.Typer(add_completion=False, invoke_without_command=True, cls=ConfigGroup,
                            help="List the run's incident records, or show one.")


class RecordProblem(Exception):
    def __init__(self, code: ExitCode, message: str):
        self.code = code
        super().__init__(message)


# --- reading records (shared with `runbook replay`) ----------------------------------------------
def open_store(config: Path) -> tuple[LoadedConfig, IncidentStore]:
    """(LoadedConfig, IncidentStore) for a run config; SourceError -> RecordProblem(BAD_CONFIG)."""
    from engine.records.incident_store import IncidentStore
    from engine.trainers.run_config import load_config

    try:
        loaded = load_config(config)
    except SourceError as error:
        raise RecordProblem(ExitCode.BAD_CONFIG, "\n".join(error.messages)) from None
    # The counter file is only touched by next_id(), which a reader never calls.
    return loaded, IncidentStore(loaded.run_dir, loaded.project_dir / ".runbook" / "incident-counter")


def _ids(store: IncidentStore) -> list[str]:
    from engine.records.incident_store import IncidentsUnreadable

    try:
        return store.ids()
    except IncidentsUnreadable as error:
        raise RecordProblem(ExitCode.NOT_FOUND, f"{error}; no record could be read") from None


def read_record(store: IncidentStore, incident_id: str) -> dict:
    """The record as JSON for formatting; exit 9 with one sentence when it cannot be used."""
    from engine.records.incident_store import BadIncidentRecord

    try:
        return store.read(incident_id).to_json()
    except BadIncidentRecord as bad:
        if bad.missing:   # the folder is listed only here: once per record read, a list of 10,000 took minutes
            ids = _ids(store)
            known = (", ".join(ids) if len(ids) <= 20 else f"{', '.join(ids[:3])}, ... {', '.join(ids[-3:])} "
                     f"({len(ids)} records)") or "none"
            shown = incident_id[:40]
            what = (f"there is no {incident_id} in {store.dir}" if bad.reason == "does not exist"
                    else f"'{shown}' is not an incident id (incident-N); known in {store.dir}")
            raise RecordProblem(ExitCode.NOT_FOUND, f"{what}; known: {known}" if "known" not in what else f"{what}: {known}") from None
        raise RecordProblem(ExitCode.NOT_FOUND, f"{bad}; nothing was changed") from None


def read_all(store: IncidentStore, limit: int = 0) -> tuple[list[dict], dict[str, str]]:
    """Every readable record (limit > 0: of the newest `limit` files only), oldest first, and
    {id: one sentence} per unreadable file (or the folder)."""
    return read_page(store, limit)[:2]


def read_page(store: IncidentStore, limit: int) -> tuple[list[dict], dict[str, str], int]:
    """read_all, and how many record files there are: only the page's files are read (at 10,000 records
    reading them all took minutes; the list of names is cheap)."""
    records: list[dict] = []
    problems: dict[str, str] = {}
    try:
        ids = _ids(store)
    except RecordProblem as problem:
        return [], {"incidents/": str(problem)}, 0
    total, ids = len(ids), ids[-limit:] if limit > 0 else ids
    for incident_id in ids:
        try:
            records.append(read_record(store, incident_id))
        except RecordProblem as problem:
            problems[incident_id] = str(problem)
    return records, problems, total


def report(problem: RecordProblem) -> ExitCode:
    text = for_display(problem)
    err.print(Text("error: " + text) if problem.code != ExitCode.BAD_CONFIG else Text(text))
    return problem.code


# --- formatting ----------------------------------------------------------------------------------
def when(record: dict) -> str:
    opened = record.get("opened_at")
    if isinstance(opened, (int, float)):
        return dt.datetime.fromtimestamp(opened).strftime("%Y-%m-%d %H:%M")
    return str(record.get("opened_at_iso") or "?")


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value)


def row(record: dict) -> dict:
    return {
        "id": record.get("id"), "when": when(record), "playbook": record.get("playbook"),
        "outcome": record.get("outcome"), "step": record.get("step_at_failure"),
        "steps_lost": record.get("steps_lost"), "tokens_lost": record.get("tokens_lost"),
        "recovery_seconds": record.get("recovery_seconds"),
    }


def _checked_text(checked: dict, key: str, value: Any) -> str:
    """A step or count of a record as shown: 'invalid (why)' when out of range (a step of -5 is no step)."""
    if key in INCIDENT_STEPS + INCIDENT_COUNTS and (checked.get("invalid") or {}).get(key):
        return field_text(checked, key)
    return _show(value)


def config_changes(record: dict) -> dict[str, list]:
    """key -> [before, after]: from config_before/config_after when both exist, else as recorded."""
    before, after = record.get("config_before"), record.get("config_after")
    if isinstance(before, dict) and isinstance(after, dict):
        flat_before, flat_after = _flatten(before), _flatten(after)
        return {k: [flat_before.get(k), flat_after.get(k)] for k in sorted(set(flat_before) | set(flat_after))
                if flat_before.get(k) != flat_after.get(k)}
    recorded = record.get("config_changes")
    return dict(recorded) if isinstance(recorded, dict) else {}


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def shown(record: dict) -> dict:
    """PURE. The record as it may reach a terminal: every text with its secrets redacted and its control
    characters neutralised (a log line can clear the screen, retitle the window or reorder what is read).
    Records written before redaction existed are redacted here too."""
    return redact_tree(record, for_display)


def print_table(records: list[dict]) -> None:
    # SIMPLE box, two-line headers, no-wrap cells: the table stays readable in an 80-column terminal or CI log.
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    columns: list[tuple[str, JustifyMethod]] = [("id", "left"), ("when", "left"), ("playbook", "left"), ("outcome", "left"),
                                                ("step", "right"), ("steps\nlost", "right"), ("recovery\ns", "right")]
    for name, justify in columns:
        numeric = justify == "right"   # a hostile record's 20-digit step must not squeeze the id out of the table
        table.add_column(name, justify=justify, no_wrap=name != "playbook", min_width=12 if name == "id" else None,
                         max_width=12 if numeric else None, overflow="ellipsis" if numeric else "fold")
    record_key = {"step": "step_at_failure", "steps_lost": "steps_lost"}
    for record in records:
        record = shown(record)
        checked, _ = checked_incident(record)
        r = row(record)
        style = {"recovered": "green", "escalated": "yellow", "failed": "red"}.get(str(r["outcome"]), "")
        table.add_row(*(Text(_checked_text(checked, record_key.get(k, k), r[k]), style=style if k == "outcome" else "")
                        for k in ("id", "when", "playbook", "outcome", "step", "steps_lost", "recovery_seconds")))
    out.print(table)


def print_record(record: dict) -> None:
    record = shown(record)
    checked, _ = checked_incident(record)
    out.print(Text(f"{record.get('id')}: {record.get('playbook')} ({record.get('outcome')})", style="bold"))
    summary = [
        ("symptom", record.get("symptom")), ("severity", record.get("severity")),
        ("decision", f"{record.get('decision')}: {record.get('decision_reason')}"),
        ("playbook", f"{record.get('playbook_source')} [{record.get('playbook_hash')}]"),
        ("opened", f"{when(record)} ({record.get('opened_at_iso')})"),
        ("step at failure", record.get("step_at_failure")), ("tokens at failure", record.get("tokens_at_failure")),
        ("trainer exit code", record.get("trainer_exit_code")),
        ("resumed from", record.get("resumed_from")), ("resumed step", record.get("resumed_step")),
        ("steps lost", record.get("steps_lost")), ("tokens lost", record.get("tokens_lost")),
        ("recovery seconds", record.get("recovery_seconds")),
        ("data skipped", skipped_words(record)),   # the window a skip_data left out, and what the trainer said
        ("escalation", record.get("escalation_reason")), ("lesson", record.get("lesson")),
    ]
    key_of = {"step at failure": "step_at_failure", "tokens at failure": "tokens_at_failure",
              "resumed step": "resumed_step", "steps lost": "steps_lost", "tokens lost": "tokens_lost"}
    for label, value in summary:
        if value not in (None, "", "None: None"):
            out.print(Text(f"  {label + ':':<19}{_checked_text(checked, key_of.get(label, label), value)}"))
    for note in record.get("notes") or []:
        out.print(Text(f"  note:              {note}"))

    actions = Table(title="actions", title_justify="left")
    for name in ("#", "verb", "result", "summary", "s"):
        actions.add_column(name, justify="right" if name in ("#", "s") else "left")
    for a in record.get("actions") or []:
        if isinstance(a, dict):
            result = "skipped" if a.get("skipped") else ("ok" if a.get("ok") else "FAILED")
            actions.add_row(Text(_show((a.get("index") or 0) + 1)), Text(str(a.get("verb"))),
                            Text(result, style={"ok": "green", "FAILED": "red"}.get(result, "")),
                            Text(str(a.get("summary", ""))), Text(f"{a.get('seconds') or 0:.2f}"))
    if actions.row_count:
        out.print(actions)
    else:
        out.print(Text("  actions: none"))

    changes = config_changes(record)
    out.print(Text("config changes:", style="bold"))
    if not changes:
        out.print(Text("  none"))
    for key, (before, after) in changes.items():
        out.print(Text(f"  {key}: {before} -> {after}"))

    excerpt = record.get("log_excerpt") or []
    out.print(Text(f"log excerpt ({len(excerpt)} line(s)):", style="bold"))
    for line in excerpt:
        out.print(Text(f"  | {line}"))


# --- commands ------------------------------------------------------------------------------------
JsonOption = typer.Option(False, "--json", help="machine-readable output")


DEFAULT_LIMIT = 50


@incidents_app.callback()
def list_incidents(ctx: typer.Context, config: Optional[Path] = config_argument(),
                   config_opt: Optional[Path] = config_option(), as_json: bool = JsonOption,
                   limit: int = typer.Option(DEFAULT_LIMIT, "--limit", "-n", min=0,
                                             help="the newest N records (0: all of them)")) -> None:
    """List the incident records of the run (id, when, playbook, outcome, step, lost compute), the newest
    50 unless --limit says otherwise."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = {"config": config or config_opt}  # `incidents -c X show ...` works too
        return
    config = chosen_config(config, config_opt)
    try:
        _loaded, store = open_store(config)
    except RecordProblem as problem:
        raise typer.Exit(int(report(problem)))
    records, problems, total = read_page(store, limit)
    if as_json:   # json.dumps writes control characters as \u escapes; secrets are redacted
        typer.echo(json.dumps([row(redact_tree(r, redact)) for r in records], indent=2))
    elif records:
        print_table(records)
    elif not problems:
        out.print(Text(f"no incidents recorded in {store.dir}"))
    for text in problems.values():
        err.print(Text("error: " + for_display(text)))
    if 0 < limit < total:
        err.print(Text(f"the newest {limit} of {total} records (--limit 0 lists all; "
                       "`runbook incidents show incident-N` one)"))
    raise typer.Exit(int(ExitCode.NOT_FOUND if problems else ExitCode.OK))


@incidents_app.command("show")
def show_incident(ctx: typer.Context, incident_id: str = typer.Argument(..., help="incident-N"),
                  config: Optional[Path] = config_argument(), config_opt: Optional[Path] = config_option(),
                  as_json: bool = JsonOption) -> None:
    """Show one incident: summary, actions with results, config changes, log excerpt."""
    config = chosen_config(config, config_opt or (ctx.obj or {}).get("config"))
    try:
        _loaded, store = open_store(config)
        record = read_record(store, incident_id)
    except RecordProblem as problem:
        raise typer.Exit(int(report(problem)))
    if as_json:
        typer.echo(json.dumps(redact_tree(record, redact), indent=2, default=str))
    else:
        print_record(record)
    raise typer.Exit(int(ExitCode.OK))
