"""`runbook playbooks draft incident-N [CONFIG] [--runs RUN_DIR ...]`: a playbook drafted from an
escalated incident, written to `playbooks/drafts/` (not active until moved to `playbooks/`), then
checked: lint, its generated tests, and which past decisions it would change (a replay of every
record with and without it). The drafting is engine/language/drafting.py; this module reads and writes.

Exit: 0 drafted and every check passed, 1 it would change a past decision other than its own
incident's, 8 lint or a generated test failed (the file is written, for review), 9 no such incident
or an unreadable record, 14 the incident needs no playbook (it was recovered, or is still open),
3 a bad config or playbook set.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.text import Text

from runbook.commands.incidents_cmd import RecordProblem, err, open_store, out, read_all, read_record, report
from runbook.config_arg import chosen_config, config_argument, config_option
from runbook.exit_codes import ExitCode
from engine.core.yaml_source import SourceError

if TYPE_CHECKING:
    from engine.core.config import RunConfig
    from engine.language.playbook import Playbook

DRAFTS = Path("playbooks") / "drafts"


def _say(text: str, style: str | None = None) -> None:
    out.print(Text(text, style=style or ""))   # rich's Text takes "" for no style


def _other_runs(run_dirs: list[Path]) -> list[dict]:
    """The records of other run folders (bounded reads: engine/records/failure_ledger_read.py), each marked with its run."""
    from engine.records.failure_ledger_read import read_records

    records = []
    for run_dir in run_dirs:
        if not (run_dir / "incidents").is_dir():
            err.print(Text(f"warning: {run_dir} has no incidents/ folder; no records from it"))
            continue
        found, problems = read_records(run_dir)
        for problem in problems:
            err.print(Text(f"warning: {problem}"))
        records += [{**record, "run": str(run_dir)} for record in found]   # ids repeat across projects
    return records


def _handled_today(record: dict, today: list[Playbook], config: RunConfig, records: list[dict]) -> str | None:
    """The playbook that would recover this incident today (one was added since it escalated), if any."""
    from engine.language.replay import RecordError, recorded_config, replay
    from engine.records.signature import UNKNOWN_CLASSES

    try:
        now = replay(record, today, recorded_config(record, config)[0], earlier=records).now
    except RecordError:
        return None
    return now.playbook if now.kind == "recover" and now.playbook not in UNKNOWN_CLASSES else None


def draft(
    incident_id: str = typer.Argument(..., help="the escalated incident to draft a playbook from (incident-N)"),
    config: Optional[Path] = config_argument(),
    config_opt: Optional[Path] = config_option(),
    runs: Optional[list[Path]] = typer.Option(None, "--runs", help="other run folders whose incidents the draft must "
                                                                   "not fire on (repeatable)"),
    force: bool = typer.Option(False, "--force", help="replace an earlier draft of the same name"),
) -> None:
    """Draft a playbook from an escalated incident into playbooks/drafts/, and check it (lint, tests, replay)."""
    from engine.language.drafting import NotDraftable, draft_playbook, why_not_draftable
    from engine.language.drafting_checks import as_yaml, changed_decisions, others_tests_with, with_pinned_actions
    from engine.core.durable import atomic_write_text
    from engine.language.playbook_set import load_set
    from runbook.playbook_lint import lint_paths

    config = chosen_config(config, config_opt)
    try:
        loaded, store = open_store(config)
        record = read_record(store, incident_id)
    except RecordProblem as record_problem:
        raise typer.Exit(int(report(record_problem)))
    if (reason := why_not_draftable(record)) is not None:
        err.print(Text(f"error: {reason}"))
        raise typer.Exit(int(ExitCode.DRAFT_REFUSED))
    try:
        today = load_set(loaded.playbook_paths, loaded.config.playbooks.shipped)[0]
    except SourceError as error:
        err.print(Text("\n".join(error.messages)))
        raise typer.Exit(int(ExitCode.BAD_CONFIG))
    records, unreadable = read_all(store)
    for problem in unreadable.values():
        err.print(Text(f"warning: {problem}"))
    if (handled := _handled_today(record, today, loaded.config, records)) is not None:
        err.print(Text(f"error: {incident_id} would now be recovered by '{handled}' (replayed against today's "
                       f"playbooks): it needs no new playbook"))
        raise typer.Exit(int(ExitCode.DRAFT_REFUSED))
    others = [r for r in records if r.get("id") != incident_id] + _other_runs(list(runs or []))
    try:
        drafted = draft_playbook(record, others, today)
    except NotDraftable as refused:
        err.print(Text(f"error: {refused}"))
        raise typer.Exit(int(ExitCode.DRAFT_REFUSED))
    playbook, results = with_pinned_actions(drafted.tree, today)

    path = loaded.project_dir / DRAFTS / f"{drafted.name}.yaml"
    if path.exists() and not force:
        err.print(Text(f"error: {path} already exists (an earlier draft?); review it, or pass --force to replace it"))
        raise typer.Exit(int(ExitCode.DRAFT_REFUSED))
    header = (f"# Drafted by `runbook playbooks draft {incident_id}` from {store.path(incident_id)}.\n"
              f"# Signature {drafted.signature.id}: {drafted.signature.text}\n"
              f"# Actions: {drafted.choice}.\n"
              f"# Not active here: review it, then move it to {loaded.project_dir / 'playbooks'}/ to use it.\n")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, as_yaml(drafted.tree, header))
    except OSError as error:
        err.print(Text(f"error: cannot write {path}: {error.strerror or error}; nothing was drafted"))
        raise typer.Exit(int(ExitCode.BAD_CONFIG))
    _say(f"drafted playbook '{drafted.name}' -> {path}")
    _say(f"  signature: {drafted.signature.id}: {drafted.signature.text}")
    _say(f"  actions: {drafted.choice}")
    for note in drafted.notes:
        _say(f"  note: {note}", "yellow")

    lint = lint_paths([path, *loaded.playbook_paths], loaded.config, include_shipped=loaded.config.playbooks.shipped)
    own = [line for line in lint.errors + lint.warnings if str(path) in line]
    lint_ok = not lint.errors
    _say(f"lint: {'ok' if lint_ok and not own else 'see below'}", None if lint_ok else "red")
    for line in lint.errors + own:
        _say(f"  {line}", "red" if line in lint.errors else "yellow")

    failed = [r for r in results if not r.passed]
    _say(f"tests: {len(results) - len(failed)} passed, {len(failed)} failed", "red" if failed else None)
    everyone = others_tests_with(playbook, today)
    broken = [r for r in everyone if not r.passed]
    for result in results:
        mark = "PASS" if result.passed else "FAIL"
        fired = f"fires at observation {result.fired_at} ({', '.join(result.actions or [])})" if result.fired_at else "does not fire"
        _say(f"  {mark} {result.test} - {fired}")
        for problem in result.problems:
            _say(f"       {problem}", "red")

    _say(f"the other playbooks' tests with the draft added: {len(everyone) - len(broken)} passed, {len(broken)} failed",
         "red" if broken else None)
    for result in broken:
        _say(f"  FAIL {result.playbook}: {result.test}: {'; '.join(result.problems)}", "red")
    failed += broken

    changes, problems = changed_decisions(records, today, playbook, loaded.config, record)
    unexpected = [c for c in changes if not c.expected]
    _say(f"replay --all with the draft: {len(records)} incident(s), {len(changes)} decision(s) would change "
         f"({len(changes) - len(unexpected)} of this failure, {len(unexpected)} other)", "red" if unexpected else None)
    for change in changes:
        why = "this failure" if change.expected else "ANOTHER FAILURE"
        _say(f"  {change.incident_id} ({why}): {change.before}\n      -> {change.after}", None if change.expected else "red")
    for problem in problems:
        err.print(Text(f"warning: cannot replay: {problem}"))
    if not any(c.incident_id == incident_id for c in changes):
        _say(f"  note: the draft would not change {incident_id}'s own decision: a playbook of higher priority still "
             f"decides it (its priority is {playbook.priority}; `runbook playbooks explain {playbook.name} --state "
             f"{store.path(incident_id)}` shows the match)", "yellow")

    if failed or not lint_ok:
        raise typer.Exit(int(ExitCode.INVALID))
    if unexpected:
        raise typer.Exit(int(ExitCode.NO_MATCH))
    _say(f"review {path}, then `mv {path} {loaded.project_dir / 'playbooks'}/` to use it", "green")
