"""`runbook triage LOG [--exit N | --signal NAME] [CONFIG] [--json]`: what runbook would decide for a log
that did not run under it (a run outside runbook, a colleague's): the winning playbook, the clauses that
matched, the evidence a log cannot give, and the planned actions. The judging is the watcher's own
(engine/watch/triage.py: Observer, exit normalisation, decide, plan); nothing is written anywhere.

Exit 0: a playbook would recover the run (or the trainer exited 0 and nothing matches); 16: runbook
would escalate (no playbook claims the failure, unknown-crash, or the plan escalates); 9: the LOG
cannot be read; 3: a bad CONFIG or playbook; 2: a bad command line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Optional

import typer

from runbook.config_arg import config_argument, config_option
from runbook.exit_codes import ExitCode

if TYPE_CHECKING:
    from engine.core.config import RunConfig
    from engine.language.clauses.base import Explanation
    from engine.language.playbook import Playbook
    from engine.watch.triage import Triage

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """A log's bytes as one terminal line: control characters (binary junk, escape codes) shown as \\xNN."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _fail(code: ExitCode, *lines: str) -> NoReturn:
    for line in lines:
        typer.echo(printable(line), err=True)
    raise typer.Exit(int(code))


def _setup(config_path: Optional[Path]) -> tuple[RunConfig, list[Playbook], str]:
    """(run config, playbooks, what was used in words): the user's run config and its playbooks (shipped +
    playbooks.paths), or without one runbook's defaults and the shipped playbooks only."""
    from engine.core.config import RunConfig
    from engine.core.yaml_source import SourceError
    from engine.language.playbook_set import load_run_playbooks, load_set, origin
    from engine.trainers import adapter_for
    from engine.trainers.run_config import load_config

    try:
        if config_path is None:
            return RunConfig(), load_set([], True)[0], "runbook's default run config and the shipped playbooks (no CONFIG given)"
        loaded = load_config(config_path)
        playbooks = load_run_playbooks(loaded, adapter_for(loaded.config.trainer.kind))
    except SourceError as error:
        _fail(ExitCode.BAD_CONFIG, *error.messages)
    own = sum(1 for p in playbooks if origin(p) != "shipped")
    return loaded.config, playbooks, f"{config_path} ({len(playbooks)} playbooks, {own} of the project's own)"


def _tree(explanation: Explanation, depth: int = 0) -> list[str]:
    mark = "[matched] " if explanation.matched else "[no match]"
    line = f"{'    ' * depth}{mark} {explanation.clause}: expected {explanation.expected}"
    if explanation.actual:
        line += f"; actual {explanation.actual}"
    return [printable(line)] + [l for child in explanation.children for l in _tree(child, depth + 1)]


def _explanation_dict(explanation: Explanation | None) -> dict | None:
    if explanation is None:
        return None
    # "held": the key's old name, still written for the readers of earlier versions' output.
    return {"clause": explanation.clause, "matched": explanation.matched, "held": explanation.matched,
            "expected": explanation.expected, "actual": explanation.actual,
            "children": [_explanation_dict(c) for c in explanation.children]}


def triage(
    # readable=False: click's own access() check would answer an unreadable LOG with a usage error (exit 2);
    # the engine's bounded read reports it as documented (exit 9, "cannot read: Permission denied").
    log: Path = typer.Argument(..., metavar="LOG", help="the trainer's log (its end is read: at most the last 4 MiB)",
                               show_default=False, readable=False),
    config: Optional[Path] = config_argument("run config (YAML) whose values and playbooks judge the log; "
                                             "default: runbook's defaults and the shipped playbooks"),
    config_opt: Optional[Path] = config_option(),
    exit_code: Optional[str] = typer.Option(None, "--exit", metavar="N", show_default=False,
                                            help="the trainer's exit code, -64 to 255 (137 = SIGKILL, as a shell shows it); "
                                                 "default: read from the log's ending where it shows one (a traceback)"),
    signal_arg: Optional[str] = typer.Option(None, "--signal", help="the signal that ended the trainer, e.g. SIGTERM"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object"),
) -> None:
    """What runbook would decide for a log from a run it did not watch: playbook, why, what it lacked, the plan.
    Writes nothing. Exit 0 recover, 16 escalate, 9 unreadable LOG."""
    from engine.core.errors import SourceError
    from engine.trainers import adapter_for
    from engine.watch.triage import ExitUnknown, ending, parse_exit, triage as judge

    if exit_code is not None and signal_arg is not None:
        _fail(ExitCode.USAGE, "error: give --exit N or --signal NAME, not both")
    if config is not None and config_opt is not None and config != config_opt:
        _fail(ExitCode.USAGE, f"error: two run configs given ({config} and --config {config_opt}); give one")
    try:
        end = ending(parse_exit(exit_code) if exit_code is not None else None, signal_arg)
    except ExitUnknown as error:
        _fail(ExitCode.USAGE, f"error: {error}")
    run_config, playbooks, used = _setup(config or config_opt)
    try:
        result = judge(log, end, run_config, playbooks, adapter_for(run_config.trainer.kind))
    except SourceError as error:
        _fail(ExitCode.NOT_FOUND, *(f"error: {m}" for m in error.messages))
    code = ExitCode.OK if result.verdict in ("recover", "completed") else ExitCode.TRIAGE_ESCALATE
    decision = result.decision
    if as_json:
        metrics = result.snapshot.metrics
        typer.echo(json.dumps({
            "log": str(log), "log_bytes": result.log.size, "bytes_read": result.log.read, "lines": len(result.log.lines),
            # As judged: given, or read from the log's ending ("given" then says "(inferred)", `missing` from what).
            "exit": {"code": result.ending.code, "signal": result.ending.signal, "known": result.ending.known,
                     "given": result.ending.given},
            "config": used,
            "verdict": result.verdict,
            "playbook": decision.playbook.name if decision else None,
            "decision": None if decision is None else {
                "kind": decision.kind, "reason": decision.reason, "matched": list(decision.matched),
                "inhibited": list(decision.inhibited), "priority": decision.playbook.priority,
                "description": decision.playbook.description, "acts_on": list(decision.playbook.acts_on),
                "evidence": list(decision.playbook.acts_on)},   # acts_on's old name, for old readers
            "explain": _explanation_dict(result.explanation),
            "missing": result.missing,
            "plan": [step.to_dict() for step in result.steps],
            "rung": result.rung,
            "metrics": {"step": metrics.step, "iter_num": metrics.iter_num, "loss": metrics.loss,
                        "val_loss": metrics.val_loss, "last_healthy_step": metrics.last_healthy_step},
            "expression_errors": result.errors,
            "exit_code": int(code),
        }))
        raise typer.Exit(int(code))
    for line in _report(log, result, used, code):
        typer.echo(line)
    raise typer.Exit(int(code))


def _report(log: Path, result: Triage, used: str, code: ExitCode) -> list[str]:
    from engine.core.bounded_read import shown

    end, decision, metrics = result.ending, result.decision, result.snapshot.metrics
    lines = [f"log: {shown(log)} ({len(result.log.lines):,} lines, {result.log.read:,} bytes read); trainer ended: {end.given}"
             + (f" -> code {end.code}, {end.signal}" if end.signal and end.given != f"signal {end.signal}" else "")]
    lines.append(f"config: {used}")
    if metrics.step is not None:
        lines.append(f"last progress: step {metrics.step}, loss {metrics.loss}")
    if decision is None:
        if result.verdict == "completed":
            lines.append("decision: no playbook matches; the trainer exited 0 (runbook records the run completed "
                         "once its final checkpoint is there)")
        else:
            lines.append("decision: no playbook matches; the watcher escalates a dead trainer nobody claims")
    else:
        playbook = decision.playbook
        what = (f"'{playbook.name}' fires ({decision.reason})" if decision.kind != "escalate"
                else f"escalate, '{playbook.name}' matched but {decision.reason}")
        lines.append(f"decision: {what}, priority {playbook.priority}")
        lines.append(printable(f"  {playbook.description}"))
        others = [name for name in decision.matched if name != playbook.name]
        if others:
            inhibited = set(decision.inhibited)
            lines.append("  also matched: " + ", ".join(f"{n} (inhibited)" if n in inhibited else n for n in others))
        if playbook.acts_on:
            lines.append("it acts on:")
            lines += [printable(f"  - {item}") for item in playbook.acts_on]
        if result.explanation is not None:   # set with the decision (engine/watch/triage.py)
            lines.append("why (the clauses of its match):")
            lines += ["  " + line for line in _tree(result.explanation)]
    for error in result.errors:
        lines.append(printable(f"expression error (fails closed): {error}"))
    lines.append("evidence a log cannot give:")
    lines += [printable(f"  - {note}") for note in result.missing]
    if result.steps:
        lines.append("plan:")
        for step in result.steps:
            status = f" (skipped: {step.skipped})" if step.skipped else f" (cannot plan: {step.error})" if step.error else ""
            lines.append(printable(f"  {step.index + 1}. {step.description}{status}"))
    if result.rung:
        lines.append(f"rung: {result.rung} (a log alone is a first attempt; `runbook replay` counts the run's)")
    verdict = {"recover": f"runbook would recover this run by '{decision.playbook.name}'" if decision else "",
               "completed": "nothing to recover", "escalate": "runbook would escalate to a human"}[result.verdict]
    lines.append(f"verdict: {verdict} (exit {int(code)})")
    return lines
