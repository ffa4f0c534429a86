"""docs/playbooks.md, generated from the models that validate playbooks (`runbook playbooks docs`).

Field tables come from the pydantic models; clauses and actions, with their docs and examples, from
the registries engine.language.clauses.CLAUSE_TYPES and engine.language.actions.REGISTRY; helper functions from the
expression environment. The prose around them lives here. Every example is validated
while rendering, so the reference cannot show a playbook the loader would refuse.
"""

from __future__ import annotations

import io
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any

from jinja2.defaults import DEFAULT_NAMESPACE
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo
from ruamel.yaml import YAML

import engine.language.playbook_testing as playbook_testing
from engine.language.actions import REGISTRY
from engine.language.clauses import CLAUSE_TYPES, AnyClause
from engine.expr import budget as sandbox
from engine.expr.expressions import _ENV
from engine.language.playbook import ActionStep, Limits, Persistence, Playbook, PlaybookTest
from engine.core.state import StateSnapshot
from engine.core.config import RunConfig, WatchSettings
from runbook.playbook_schema import duration_fields

DOC_PATH = "docs/playbooks.md"

TOP_LEVEL_NOTES = {
    "name": "unique name: lower case letters, digits, `-` and `_`",
    "description": "what failure this playbook recognises (shown in incidents and Slack)",
    "severity": "`info`, `warning` or `critical`",
    "match": "one clause (see [Match clauses](#match-clauses))",
    "for": "persistence, see [Persistence](#persistence-for)",
    "limits": "see [Limits](#limits)",
    "actions": "ordered steps, see [Actions](#actions)",
    "tests": "see [Tests](#tests)",
}

# kind -> (doc, example), a view of the clause registry for callers that list the reference's clauses.
CLAUSES: dict[str, tuple[str, str]] = {kind: (clause.doc, clause.example) for kind, clause in CLAUSE_TYPES.items()}

STATE_NOTES = {
    "trainer.exit_code": "negative: killed by that signal number",
    "trainer.signal": "e.g. `SIGTERM`",
    "trainer.stopped": "process state T (SIGSTOP)",
    "trainer.exit_pending": "gone a moment ago, its launcher still writing the exit (at most 2 s); the watch loop decides nothing on such an observation",
    "trainer.awaiting_first_failure": "a rank is gone with no known cause, or only lost peers are reported, while the "
                                      "launcher lives: the watch loop waits (at most `watch.first_failure_wait_s`) for "
                                      "the launcher's report, so that the rank that failed first decides. With "
                                      "runbook's node agents (`trainer.num_nodes` > 1), only for a rank gone from a node "
                                      "whose agent still runs (its exit record is on its way); a dead node or a lost host "
                                      "is decided at once",
    "trainer.phase": "`startup` until this launch's first progress line (preprocessing, model build, checkpoint load, "
                     "compile), then `training`; `saving` from a save's announcement to the next progress line; "
                     "`validating` from the run's first validation's announcement to the next progress line",
    "trainer.seconds_since_activity": "start-up, saves and the first validation only: seconds since the trainer last "
                                      "showed life (new output, or I/O anywhere in its process tree, or in start-up and "
                                      "validation CPU time too); null in training",
    "startup_timeout_s": "`watch.startup_timeout_s`: the longest a launch may take to its first progress line",
    "save_timeout_s": "`watch.save_timeout_s`: the longest a save may take, from the last progress line to the next",
    "trainer.ranks.world_size": "ranks of a multi-rank trainer (1: one process, the lists are empty)",
    "trainer.ranks.ranks": "each rank: rank, node, pid, alive, stopped, exit_code, signal, step, iter_num, phase, "
                           "seconds_since_heartbeat, work_seconds, host, seconds_since_record (a rank on another "
                           "host: age of its host's record, the only word of it the watcher has), error, where, "
                           "peer_loss (its own error, where in the user's code, and whether that error is a lost peer), "
                           "exit_from_launcher (its exit known only from the launcher's report)",
    "trainer.ranks.exited": "ranks whose process is gone",
    "trainer.ranks.failed": "ranks that ended with a non-zero code or a signal",
    "trainer.ranks.first_failed": "the rank that failed first (the others followed it)",
    "trainer.ranks.first_failed_signal": "the signal that ended that rank (e.g. `SIGKILL`), if one did",
    "trainer.ranks.first_failed_exit_code": "that rank's exit code (negative: a signal), from its own record or its launcher's report",
    "trainer.ranks.first_failed_error": "that rank's own error: the exception it recorded (runbook's trainer side), or "
                                        "its launcher's report of it",
    "trainer.ranks.first_failed_where": "file:line in the user's own code where that exception was raised (null: library "
                                        "code, or not known): a restart cannot fix it",
    "trainer.ranks.first_failed_peer_loss": "every failure is a collective's lost peer: the collective itself failed",
    "trainer.ranks.under_launcher": "every rank is a worker of a launcher (torchrun, accelerate, deepspeed, srun), rank 0 "
                                    "included: the trainer process is the launcher",
    "trainer.ranks.stopped": "ranks in process state T",
    "trainer.ranks.stalled": "the ranks the others wait for: stopped, or behind them for long",
    "trainer.ranks.straggler": "a rank whose own work per micro-batch is over 1.5 x the other ranks' median and 50 ms over it",
    "trainer.ranks.straggler_ratio": "that rank's work time / the other ranks' median",
    "trainer.ranks.nodes": "with several nodes (docs/nodes.md), each node's launcher agent: node, pid, alive, exit_code, "
                           "signal, requested (ended by runbook), notice (a signal it got from outside), ranks, host, "
                           "lost (another host whose records stopped), seconds_since_record",
    "trainer.ranks.dead_nodes": "nodes whose agent was killed by a fault signal (SIGKILL, ...), not by runbook, or whose "
                                "host was lost (its records not renewed for 4 s)",
    "trainer.ranks.noticed_nodes": "nodes whose agent was told to stop from outside (SIGTERM to that node's launcher)",
    "trainer.failed_alike_before_progress": "a trainer that ended before this launch's first progress line: how many "
                                            "launches in a row (this one included) did so with the same error; 0 otherwise",
    "trainer.ranks.same_error_before_progress": "the one error every failed process (two or more, each by an exit code) "
                                                "ended with before the launch's first progress line; null otherwise",
    "metrics.step": "optimizer steps",
    "metrics.iter_num": "micro-batches",
    "metrics.loss_median": "rolling median of recent train losses",
    "new_lines": "log lines since the previous observation",
    "tail": "the last 200 log lines",
    "lines_since_progress": "how many of the tail's last lines came after the launch's last progress line (null: unknown)",
}

TEST_EXAMPLE = """\
tests:
  - name: fires when a live trainer is silent past the timeout
    config: {watch: {hang_timeout_s: 30}}
    observations:
      - {trainer: {alive: true}, seconds_since_progress: 5}
      - {trainer: {alive: true}, seconds_since_progress: 31}
    expect_fires_at: 2
    expect_actions: [record, stop, verify_checkpoints, resume]
"""


MINIMAL_PLAYBOOK = """\
name: loss-spike
description: The train loss jumped far above its rolling median (bad batch or too high a learning rate).
severity: warning
priority: 70
match:
  metric: {name: loss, op: ratio_to_median_above, value: 3, min_step: 50}
for:
  observations: 3
limits:
  max_attempts: 2
  window: 1h
actions:
  - rollback: {steps: 20}
  - set_hyperparameters:
      lr: "{{ config.lr / 2 }}"
  - resume: {from: newest_verified}
"""


def _yaml_load(text: str) -> Any:
    return YAML(typ="safe", pure=True).load(text)


def _yaml_dump(data: Any) -> str:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.indent(mapping=2, sequence=4, offset=2)
    buffer = io.StringIO()
    yaml.dump(data, buffer)
    return buffer.getvalue()


def _type(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is AnyClause or (origin is typing.Annotated and args and args[0] is AnyClause):
        return "clause"
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        if any(typing.get_origin(a) is typing.Annotated for a in args):
            return "clause"
        return " or ".join(_type(a) for a in args)
    if origin is list:
        return f"list of {_type(args[0])}"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " \\| ".join(f"`{member.value}`" for member in annotation)
    if annotation is Path:
        return "path"
    return {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}.get(annotation, "value")


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)   # the factory's value, or a copy of the default
    if isinstance(value, BaseModel):
        return "see below"
    if value in ("", [], {}):
        return "(empty)"
    if value is None or isinstance(value, bool):  # YAML spelling, as a playbook author writes it
        return {None: "`null`", True: "`true`", False: "`false`"}[value]
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def _table(model: type[BaseModel], notes: dict[str, str] | None = None) -> str:
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    durations = duration_fields(model)
    for name, info in model.model_fields.items():
        key = info.alias or name
        meaning = info.description or (notes or {}).get(key, "")
        kind = "seconds or a duration (`30s`, `5m`, `1h`)" if key in durations else _type(info.annotation)
        rows.append(f"| `{key}` | {kind} | {_default(info)} | {meaning} |")
    return "\n".join(rows)


def _fence(text: str) -> str:
    return f"```yaml\n{text.rstrip()}\n```"


def _clauses() -> str:
    adapter = TypeAdapter(AnyClause)
    out = []
    for kind, clause in CLAUSE_TYPES.items():
        if not isinstance(adapter.validate_python(_yaml_load(clause.example)), clause):
            raise ValueError(f"the example of clause '{kind}' is not a '{kind}' clause")  # a wrong example fails the generation
        out.append(f"### `{kind}`\n\n{clause.doc}\n")
        spec = next(iter(clause.model_fields.values())).annotation
        if isinstance(spec, type) and issubclass(spec, BaseModel):
            out.append(_table(spec) + "\n")
        out.append(_fence("match:\n" + "".join(f"  {line}\n" for line in clause.example.splitlines())) + "\n")
    return "\n".join(out).rstrip()


def _actions() -> str:
    out = []
    for verb, definition in REGISTRY.items():
        step = ActionStep.model_validate(definition.example)  # validates the example's params
        if step.verb != verb:
            raise ValueError(f"the example of action '{verb}' is for '{step.verb}'")
        out.append(f"### `{verb}`\n\n{definition.doc}\n")
        if definition.params.model_fields:
            out.append(_table(definition.params) + "\n")
        else:
            out.append("No parameters.\n")
        out.append(_fence(_yaml_dump({"actions": [definition.example]})) + "\n")
    return "\n".join(out).rstrip()


def _state_fields(model: type[BaseModel] = StateSnapshot, prefix: str = "state.") -> list[str]:
    rows = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows += _state_fields(annotation, f"{prefix}{name}.")
            if name == "disk":
                rows.append(f"| `{prefix}disk.free_percent` | number | free space in percent |")
            continue
        key = f"{prefix}{name}"
        meaning = info.description or STATE_NOTES.get(key.removeprefix('state.'), '')
        rows.append(f"| `{key}` | {_type(annotation)} | {meaning} |")
    return rows


def _expressions() -> str:
    helpers = sorted(n for n in set(_ENV.globals) - set(DEFAULT_NAMESPACE) if not n.startswith("_")) + ["range", "dict"]
    config_rows = [f"| `config.{n}` | {_type(i.annotation)} | {i.description or ''} |"
                   for n, i in RunConfig.model_fields.items() if _type(i.annotation) != "mapping"]
    config_rows += [f"| `config.watch.{n}` | {_type(i.annotation)} | {i.description or ''} |"
                    for n, i in WatchSettings.model_fields.items()]
    return "\n".join([
        "Conditions (`expr:` clauses, `if:` guards) and computed parameters use one language: "
        "[Jinja2 expressions](https://jinja.palletsprojects.com/en/stable/templates/#expressions) "
        "(`and`, `or`, `not`, `is none`, `//`, filters such as `| round(1)`), compiled once at load time "
        "and evaluated in an immutable sandbox. Rules:\n",
        "- A condition must yield a real `true`/`false`. An error (a missing attribute, `None > 3`) or "
        "any other value makes it **false** (fails closed); the watcher logs the error, and "
        "`runbook playbooks lint` reports it as a warning by evaluating every expression against sample states.",
        "- Names starting with `_` cannot be reached (`().__class__` is refused at load), nothing can be "
        "modified, and only `state`, `config` and the helpers below are in scope; in actions (`if:` and "
        "computed parameters) also `attempt`: 1 for the first firing of the playbook in its limits window, "
        "2 for the next, and so on.",
        "- A parameter written entirely as `\"{{ ... }}\"` is computed when the action is planned, with the "
        "expression's own type (`\"{{ config.micro_batch_size // 2 }}\"` is an integer) and then validated "
        "by the action's parameter model. Text with `{{ ... }}` inside (a note, a message, a reason) is "
        "rendered as a Jinja2 template in the same sandbox, e.g. `\"preempted at step {{ state.metrics.step }}\"`; "
        "lint renders it against sample states and warns when that fails.",
        "- **Plain data only.** Expressions and templates see model fields and properties (never methods such as "
        "`model_dump`), numbers, strings, booleans, none, lists and mappings, with their read-only methods "
        "(`lower`, `split`, `startswith`, `get`, `items`, ...). Paths in the run config arrive as text: "
        "`config.out_dir` is `\"checkpoints/pretrain\"`, and `config.out_dir.joinpath(...)` is refused, so no "
        "expression can read, write or delete a file. `macro`, `include`, `import`, `extends`, `block`, recursive "
        "loops, `namespace`, `lipsum`, `cycler`, `joiner`, `str.format` and the filters `center`, `indent`, "
        "`wordwrap`, `random`, `pprint`, `urlize` are not available. Lint reports a refused attribute as an error.",
        f"- **Budgets.** Integers up to {sandbox.MAX_INT_BITS} bits (`9**(9**9)` is refused before it is computed), "
        f"strings and lists up to {sandbox.MAX_SEQUENCE:,} items (`'a' * 10**10` is refused), `range()` up to "
        f"{sandbox.MAX_RANGE:,} items, {sandbox.MAX_ITERATIONS:,} loop iterations and calls per evaluation, "
        f"{sandbox.MAX_OUTPUT:,} characters of template output, format widths under 1000, {sandbox.MAX_SECONDS:g} s "
        f"of wall time, {sandbox.MAX_SOURCE:,} characters of source nested at most {sandbox.MAX_DEPTH} deep. "
        "Exceeding one is an error that names the expression (the condition fails closed; lint reports an error).",
        "- **Log patterns** (`log.pattern`) are matched by RE2, which runs in time linear in the line's length "
        "whatever the pattern (`^(a+)+$` cannot backtrack); backreferences and lookaround are refused at load.\n",
        f"Helper functions: {', '.join(f'`{h}`' for h in helpers)} "
        "(`isnan`/`isinf`/`isfinite` are false for an unknown value; `median` of an empty list is none).\n",
        "### `state`: the live snapshot\n",
        "| name | type | meaning |", "|---|---|---|", *_state_fields(), "",
        "### `config`: the run config\n",
        "| name | type | meaning |", "|---|---|---|", *config_rows,
        "\nand the sections `config.model`, `config.data`, `config.trainer`, `config.playbooks`, "
        "`config.notifications` of the run config.",
    ])


def _tests() -> str:
    semantics = playbook_testing.__doc__.split("\n\n", 1)[1].split("\n", 1)[1].strip()
    Playbook.model_validate({"name": "x", "description": "x", "match": {"stalled": {}}, "actions": [{"stop": {}}],
                             **_yaml_load(TEST_EXAMPLE)})
    return "\n".join([
        "A playbook may carry tests: a short series of observed states and the decision it must make. "
        "`runbook playbooks test` runs every test of every playbook (CI runs it over the shipped set in `playbooks/`).\n",
        _table(PlaybookTest), "", _fence(TEST_EXAMPLE), "", "How a test runs:\n", semantics,
    ])


def render_playbook_reference() -> str:
    Playbook.model_validate(_yaml_load(MINIMAL_PLAYBOOK))
    sections = [
        "# Playbook reference",
        "<!-- Generated by `runbook playbooks docs` from the models in engine/; do not edit by hand. -->",
        "A playbook teaches runbook one failure: a YAML file (shipped in `playbooks/`, or in a project's `playbooks/`) that says how to recognise it "
        "(`match`, `for`), what to do (`actions`), how often (`limits`), and carries its own `tests`. "
        "All files are validated when `runbook watch` starts; an invalid playbook stops it from starting.",
        _fence(MINIMAL_PLAYBOOK),
        "## Top-level keys", _table(Playbook, TOP_LEVEL_NOTES),
        "## Match clauses",
        "`match` is one clause; `all`, `any` and `not` combine clauses to any depth. Each observation "
        "(one snapshot of the run, taken every `watch.poll_interval_s`) is matched against every playbook.",
        _clauses(),
        "## Persistence (`for`)",
        "A playbook fires only after its match matched consecutive observations: at least `observations` "
        "of them and for at least `seconds` (both, when both are given). The default fires on the first "
        "matching observation; say e.g. `for: {observations: 3}` so that one NaN line or one slow step "
        "does not restart a run. One observation that does not match breaks the streak; after a firing "
        "the streak starts afresh.",
        _table(Persistence), _fence("for:\n  observations: 3\n  seconds: 30s"),
        "## Limits",
        "Recoveries of one playbook are limited: at most `max_attempts` firings within the sliding `window`; "
        "after a firing, the next one must wait `cooldown` x `backoff`^(n-1), n being the number of "
        "firings in the window (the decision is `wait` meanwhile). When `max_attempts` is used up the "
        "decision is `escalate`: no automatic action for that symptom any more, a human is notified, and "
        "`watch` exits with the code *escalated* when nothing else can proceed. A global circuit breaker, "
        "`watch.max_recoveries_per_hour` of the run config, caps recoveries of all playbooks together "
        "(except those with `counts_toward_breaker: false`, such as routine pruning). A restart-storm guard, "
        "`watch.restart_storm_incidents` (5), escalates the incident that would be the n-th in a row, of two "
        "kinds or more, while the run never got past the step where the first of them failed (a cycle "
        "OOM -> hang -> collective timeout -> OOM trips no playbook's own limit); the escalation names each "
        "incident of the chain with its step and time. "
        "Firing times and steps are kept in the run's journal, so the counts survive a watcher restart.",
        _table(Limits), _fence("limits:\n  max_attempts: 3\n  window: 1h\n  cooldown: 2m\n  backoff: 2"),
        "## Priority and inhibition",
        "When several playbooks match the same observation, the one with the highest `priority` is chosen "
        "(ties: alphabetical name); there is one incident per distinct failure and never two recoveries at "
        "once. `inhibits: [name, ...]` silences the named playbooks while this one matches, e.g. a "
        "preemption (SIGTERM) that also looks like a hang is handled once, by `preemption`.",
        _fence("name: preemption\npriority: 90\ninhibits: [hang, unknown-crash]"),
        "## Actions",
        "`actions` is an ordered list; each item is one verb with its parameters, an optional `if:` guard "
        "(an [expression](#expressions); a false or failing guard skips the step) and an optional "
        "`on_failure`: `abort` (default: stop the recovery here), `continue`, or `escalate`. "
        "Parameters are validated when the playbook is loaded; computed ones again when planned.",
        _fence("actions:\n  - set_hyperparameters:\n      micro_batch_size: \"{{ config.micro_batch_size // 2 }}\"\n"
               "    if: \"config.micro_batch_size > 1\"\n    on_failure: escalate"),
        _actions(),
        "## Expressions", _expressions(),
        "## Tests", _tests(),
        "## Tooling",
        "\n".join([
        "- `runbook playbooks lint [PATH...]`: every problem as `file:line:col: key: reason`, and runtime "
        "warnings for expressions; exit 0 only when every playbook is valid (8 otherwise). Files named are read "
        "with the shipped set as a run reads them (what they may inhibit or replace; not with `--config` naming "
        "`playbooks.shipped: false`), and only they are reported on: a draft of `runbook playbooks draft` lints as it is.",
        "- `runbook playbooks test [PATH...]`: run the tests; exit 0 only when all pass (8 otherwise).",
        "- `runbook playbooks explain NAME --state SNAPSHOT.json`: clause by clause, expected and actual "
        "value; the file may be a snapshot or an incident record (`runs/*/incidents/incident-N.json`). "
        "Exit 0 on a match, 1 when not.",
        "- `runbook playbooks draft incident-N [CONFIG] [--runs RUN_DIR...]`: a complete playbook drafted "
        "from an escalated incident (match from its failure signature, the actions of the closest known class "
        "or verify -> resume once -> escalate, tests generated from the recorded incidents), written to "
        "`playbooks/drafts/` (not active until moved to `playbooks/`), then linted, tested and replayed "
        "against every recorded incident; it prints which past decisions would change. Exit 0 when all "
        "pass, 1 when it changes another failure's decision, 8 when lint or a test fails, 14 for an "
        "incident a playbook cannot be drafted from (recovered, still open, the trainer alive). README: \"Teaching runbook a new failure\".",
        "- `runbook playbooks docs [--check]`: write (or check) this file.",
        "- `runbook playbooks schema [--output FILE]`: the JSON Schema of this format.",
        ]),
        "### Editor support",
        "Write the schema once, e.g. `runbook playbooks schema --output playbooks/playbook.schema.json`. "
        "In VS Code (with the Red Hat YAML extension) map it to the playbook files in `.vscode/settings.json`:",
        "```json\n{\n  \"yaml.schemas\": {\n    \"./playbooks/playbook.schema.json\": \"playbooks/*.yaml\"\n  }\n}\n```",
        "Any editor that uses yaml-language-server (Neovim, Helix, Emacs lsp-mode, JetBrains with the "
        "plugin) also honours a first-line comment in a playbook:",
        "```yaml\n# yaml-language-server: $schema=./playbook.schema.json\nname: hang\n```",
        "Regenerate the schema when runbook is upgraded (new actions or parameters).",
    ]
    return "\n\n".join(sections) + "\n"

