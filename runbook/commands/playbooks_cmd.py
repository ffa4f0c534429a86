"""`runbook playbooks ...`: lint, test, explain, schema and docs for the playbook language."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Optional

import typer
from pydantic import ValidationError

from runbook.exit_codes import ExitCode
from engine.core.durable import atomic_write_text
from engine.core.bounded_read import read_text_file, shown
from engine.core.yaml_source import SourceError

if TYPE_CHECKING:
    from engine.core.config import RunConfig
    from engine.core.evidence import Evidence
    from engine.core.state import StateSnapshot
    from engine.language.clauses.base import Explanation
    from engine.language.playbook import Playbook

playbooks_app = typer.Typer(no_args_is_help=True, help="Check, test, explain and document playbooks.")
DEFAULT_PLAYBOOKS = Path("playbooks")

PATHS = typer.Argument(None, help="playbook files or folders, exactly these (default: the shipped set + ./playbooks, "
                                   "or the run config's set)")
CONFIG = typer.Option(None, "--config", "-c", help="run config (YAML): its playbooks.paths and values")


def _exit(code: ExitCode, *lines: str) -> NoReturn:
    for line in lines:
        typer.echo(line, err=True)
    raise typer.Exit(int(code))


def _setup(paths: Optional[list[Path]], config_path: Optional[Path]) -> tuple[RunConfig, list[Path], bool]:
    """(RunConfig, project paths, include shipped): explicit paths are exactly the set; else the run
    config's set (shipped + playbooks.paths); else the shipped set + ./playbooks when it exists."""
    from engine.core.config import RunConfig
    from engine.trainers.run_config import load_config

    if config_path is None:
        if paths:
            return RunConfig(), list(paths), False
        return RunConfig(), [DEFAULT_PLAYBOOKS] if DEFAULT_PLAYBOOKS.exists() else [], True
    try:
        loaded = load_config(config_path)
    except SourceError as err:
        _exit(ExitCode.BAD_CONFIG, *err.messages)
    if paths:
        return loaded.config, list(paths), False
    return loaded.config, loaded.playbook_paths, loaded.config.playbooks.shipped


def _load(paths: list[Path], code: ExitCode, include_shipped: bool = False) -> list[Playbook]:
    from engine.language.playbook_set import load_set

    try:
        return load_set(paths, include_shipped)[0]
    except SourceError as err:
        _exit(code, *err.messages)


@playbooks_app.command()
def lint(paths: Optional[list[Path]] = PATHS, config: Optional[Path] = CONFIG) -> None:
    """Validate playbooks: every problem as file:line:col: key: reason. Exit 0 only when all are valid."""
    from runbook.playbook_lint import lint_paths

    named = bool(paths)
    run_config, paths, shipped = _setup(paths, config)
    # Files named alone are linted among the shipped set a run reads with them: a draft inhibits unknown-crash.
    report = lint_paths(paths, run_config, include_shipped=shipped, shipped_context=named and run_config.playbooks.shipped)
    for line in report.errors + report.warnings + report.notes:
        typer.echo(line)
    if report.files == 0 and not report.errors:
        _exit(ExitCode.INVALID, f"no playbook files (*.yaml, *.yml) in {', '.join(map(str, paths))}")
    invalid = report.files - len(report.valid)
    summary = f"{len(report.valid)} playbook(s) valid"
    summary += f", {invalid} invalid" if invalid else ""
    summary += f", {len(report.warnings)} warning(s)" if report.warnings else ""
    typer.echo(summary)
    raise typer.Exit(0 if report.ok else int(ExitCode.INVALID))


@playbooks_app.command("test")
def run_tests(paths: Optional[list[Path]] = PATHS, config: Optional[Path] = CONFIG) -> None:
    """Run the `tests:` of every playbook. Exit 0 only when all pass."""
    from engine.language.playbook_testing import run_playbook_tests

    _, paths, shipped = _setup(paths, config)
    playbooks = _load(paths, ExitCode.INVALID, shipped)
    results = run_playbook_tests(playbooks)
    for result in results:
        if result.passed:
            fired = f"fired at observation {result.fired_at} ({result.kind}: {', '.join(result.actions or [])})" \
                if result.fired_at else "did not fire"
            typer.echo(f"PASS {result.playbook}: {result.test} - {fired}")
        else:
            typer.echo(f"FAIL {result.playbook}: {result.test}")
            for problem in result.problems:
                typer.echo(f"     {problem}")
        for note in result.notes:
            typer.echo(f"     note: {note}")
    failed = sum(not r.passed for r in results)
    untested = [p.name for p in playbooks if not p.tests]
    summary = f"{len(results) - failed} passed, {failed} failed"
    summary += f" ({len(untested)} playbook(s) without tests: {', '.join(untested)})" if untested else ""
    typer.echo(summary)
    raise typer.Exit(int(ExitCode.INVALID) if failed else 0)


def _read_state(path: Path) -> tuple[StateSnapshot, dict | None]:
    """A StateSnapshot from a snapshot file or an incident record; the record's config too, if any."""
    from engine.core.state import StateSnapshot

    try:
        data = json.loads(read_text_file(path))
    except SourceError as err:
        _exit(ExitCode.NOT_FOUND, f"cannot read a JSON snapshot: {err.messages[0]}")
    except (ValueError, RecursionError) as err:
        _exit(ExitCode.NOT_FOUND, f"{shown(path)}: cannot read a JSON snapshot: {type(err).__name__ if isinstance(err, RecursionError) else err}")
    record_config = None
    if isinstance(data, dict) and isinstance(data.get("snapshot"), dict):  # an incident record
        record_config = data.get("config_before")
        data = data["snapshot"]
    try:
        return StateSnapshot.model_validate(data), record_config
    except ValidationError as err:
        first = err.errors()[0]
        _exit(ExitCode.NOT_FOUND, f"{path}: not a state snapshot: {'.'.join(map(str, first['loc']))}: {first['msg']}")


def _tree(explanation: Explanation, depth: int = 0) -> list[str]:
    mark = "[match]   " if explanation.matched else "[no match]"
    line = f"{'    ' * depth}{mark} {explanation.clause}: expected {explanation.expected}"
    if explanation.actual:
        line += f"; actual {explanation.actual}"
    return [line] + [l for child in explanation.children for l in _tree(child, depth + 1)]


def _evidence_line(evidence: Evidence) -> str:
    """state.evidence in one line: every field, `unknown` for what could not be learnt."""
    def mb(n: int | None) -> str:
        return "unknown" if n is None else f"{n / 1e6:.1f} MB"

    def known(value: object) -> object:
        return "unknown" if value is None else str(value).lower() if isinstance(value, bool) else value

    parts = [f"out_dir free {mb(evidence.out_dir_free_bytes)}", f"run_dir free {mb(evidence.run_dir_free_bytes)}",
             f"disk_nearly_full {known(evidence.disk_nearly_full)}",
             f"oom_killed {known(evidence.oom_killed)}" + (f" ({evidence.oom_detail})" if evidence.oom_detail else ""),
             f"resume_checkpoint {known(evidence.resume_checkpoint)}",
             f"resume_checkpoint_corrupt {known(evidence.resume_checkpoint_corrupt)}"
             + (f" ({evidence.resume_checkpoint_problem})" if evidence.resume_checkpoint_problem else "")]
    return "; ".join(parts)


@playbooks_app.command()
def explain(
    name: str = typer.Argument(..., help="playbook name"),
    state: Path = typer.Option(..., "--state", help="a snapshot JSON, or an incident record JSON"),
    config: Optional[Path] = CONFIG,
    playbooks: Optional[list[Path]] = typer.Option(None, "--playbooks", help="playbook files or folders"),
) -> None:
    """Clause by clause: does NAME match this state, expected vs actual. Exit 0 on match, 1 on no match."""
    from engine.language.clauses import MatchContext
    from engine.language.planner import plan
    from engine.trainers.run_config import run_config_of

    run_config, paths, shipped = _setup(playbooks, config)
    snapshot, record_config = _read_state(state)
    if config is None and record_config:
        try:
            run_config = run_config_of(record_config)  # the config the incident was decided with, by its trainer's model
        except ValidationError:
            typer.echo("note: the record's config_before is not valid any more; using the defaults")
    loaded = _load(paths, ExitCode.BAD_CONFIG, shipped)
    by_name = {p.name: p for p in loaded}
    if name not in by_name:
        _exit(ExitCode.NOT_FOUND, f"no playbook '{name}' in {', '.join(map(str, paths))} (known: {', '.join(sorted(by_name))})")
    playbook = by_name[name]
    ctx = MatchContext(state=snapshot, config=run_config)
    explanation = playbook.match.explain(ctx)
    t = snapshot.trainer
    trainer = "alive" if t.alive else f"exited (code {t.exit_code}, signal {t.signal})"
    typer.echo(f"playbook '{playbook.name}' ({playbook.source}), priority {playbook.priority}, severity {playbook.severity}")
    typer.echo(f"state: observation {snapshot.observation}, trainer {trainer}, step {snapshot.metrics.step}")
    typer.echo(f"evidence: {_evidence_line(snapshot.evidence)}")
    for line in _tree(explanation):
        typer.echo(line)
    for error in ctx.errors:
        typer.echo(f"expression error (fails closed): {error}")
    typer.echo(f"result: {'MATCH' if explanation.matched else 'NO MATCH'}")
    persist, limits = playbook.persist, playbook.limits
    needed = f"{persist.observations} consecutive matching observation(s)"
    needed += f" over at least {persist.seconds:g} s" if persist.seconds else ""
    typer.echo(f"persistence: fires after {needed}; this one snapshot counts as 1"
               + ("" if persist.observations == 1 and not persist.seconds else ", so a live run needs more"))
    typer.echo(f"limits: at most {limits.max_attempts} firing(s) per {limits.window:g} s, cooldown {limits.cooldown:g} s "
               f"(backoff x{limits.backoff:g}), then escalate; circuit breaker "
               f"{run_config.watch.max_recoveries_per_hour} recoveries/hour for the run (history not considered here)")
    if playbook.inhibits:
        typer.echo(f"inhibits: {', '.join(playbook.inhibits)}")
    others = [p for p in loaded if p.name != name and p.match.check(MatchContext(state=snapshot, config=run_config))]
    blockers = [p.name for p in others if name in p.inhibits]
    higher = [p.name for p in others if p.priority > playbook.priority and p.name not in blockers]
    if blockers:
        typer.echo(f"inhibited by: {', '.join(blockers)} (also matches this state)")
    if higher:
        typer.echo(f"outranked by: {', '.join(higher)} (higher priority, also matches this state)")
    if explanation.matched:
        typer.echo("plan:")
        for step in plan(playbook, snapshot, run_config):
            status = f" (skipped: {step.skipped})" if step.skipped else f" (cannot plan: {step.error})" if step.error else ""
            typer.echo(f"  {step.index + 1}. {step.description}{status}")
    raise typer.Exit(0 if explanation.matched else int(ExitCode.NO_MATCH))


@playbooks_app.command("list")
def list_playbooks(paths: Optional[list[Path]] = PATHS, config: Optional[Path] = CONFIG) -> None:
    """Every playbook in use, highest priority first, with its origin: shipped, or the project file."""
    from engine.language.matcher import ordered
    from engine.language.playbook_set import load_set, origin

    _, paths, shipped = _setup(paths, config)
    try:
        playbooks, replaced = load_set(paths, shipped)
    except SourceError as err:
        _exit(ExitCode.INVALID, *err.messages)
    replacing = {r.project.name for r in replaced}
    for playbook in ordered(playbooks):
        note = " (replaces the shipped one)" if playbook.name in replacing else ""
        typer.echo(f"{playbook.name:<22} priority {playbook.priority:>4}  {origin(playbook)}{note}")
    typer.echo(f"{len(playbooks)} playbook(s): {sum(origin(p) == 'shipped' for p in playbooks)} shipped, "
               f"{sum(origin(p) != 'shipped' for p in playbooks)} from the project ({len(replaced)} replacing shipped ones)")


@playbooks_app.command()
def schema(output: Optional[Path] = typer.Option(None, "--output", "-o", help="write to FILE instead of stdout")) -> None:
    """JSON Schema of the playbook format, for editors (see docs/playbooks.md, 'Editor support')."""
    from runbook.playbook_schema import playbook_schema

    text = json.dumps(playbook_schema(), indent=2) + "\n"
    if output is None:
        typer.echo(text, nl=False)
    else:
        atomic_write_text(output, text)
        typer.echo(f"wrote {output}", err=True)


@playbooks_app.command()
def docs(
    check: bool = typer.Option(False, "--check", help="only check that the file is up to date (exit 8 if not)"),
    output: Path = typer.Option(Path("docs/playbooks.md"), "--output", "-o"),
) -> None:
    """Write the playbook reference generated from the models (docs/playbooks.md)."""
    from runbook.docs_gen import render_playbook_reference

    text = render_playbook_reference()
    if check:
        current = output.read_text(encoding="utf-8") if output.exists() else ""
        if current != text:
            _exit(ExitCode.INVALID, f"{output} is out of date; run `runbook playbooks docs`")
        typer.echo(f"{output} is up to date")
        return
    atomic_write_text(output, text)
    typer.echo(f"wrote {output}")


from runbook.commands.draft_cmd import draft as draft_command  # noqa: E402  (its own module: reads records, writes a file)

playbooks_app.command("draft")(draft_command)
