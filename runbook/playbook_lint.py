"""`runbook playbooks lint`: every problem of every playbook file as `file:line:col: key: reason`.

Load-time errors (YAML, unknown keys, unknown actions, regexes, expressions, names a typed model
lacks such as `state.trainer.alvie`, params, duplicate names, `inhibits`) come from the loader `runbook watch` uses (engine.language.loader), so lint can
never accept what watch refuses. On top of that, lint evaluates every expression against two sample
snapshots and reports runtime errors as warnings: an expression that errors fails closed in a real
run (and logs an error at every observation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engine.language.actions import REGISTRY
from engine.language.actions.set_hyperparameters import SetHyperparametersParams
from engine.language.planner import plan
from engine.expr.expressions import LIMIT_MARK, Expression, compile_expression, evaluate_condition, is_expression, render_template
from engine.language.playbook import Playbook
from engine.language.loader import playbook_files, set_problems, where
from engine.language.playbook_set import SHIPPED_DIR, read_set, shipped_files
from engine.language.typed_names import expressions  # every expression of a playbook, with its YAML location and role
from engine.core.state import CheckpointStatus, DiskStatus, Metrics, StateSnapshot, TrainerStatus
from engine.core.config import RunConfig
from engine.core.yaml_source import SourceError, load_yaml

_PROGRESS = "Epoch 1 | iter 480 step 120 | loss train: 3.200, val: 3.400 | iter time: 95.12 ms (step) remaining time: 0:01:10"

# A healthy run in progress, every metric known: an expression that errors here errors in real runs too.
SAMPLE_RUNNING = StateSnapshot(
    observation=100, time=1_700_000_000.0,
    trainer=TrainerStatus(pid=4242, alive=True, launches=1, seconds_running=600.0),
    metrics=Metrics(step=120, iter_num=480, tokens=122_880, loss=3.2, val_loss=3.4, best_val_loss=3.3,
                    best_val_step=100, loss_median=3.25, loss_history=[3.3, 3.25, 3.2], tokens_per_sec=5000.0,
                    baseline_tokens_per_sec=5200.0, grad_norm=0.9, lr=0.003),
    seconds_since_progress=0.5, new_lines=[_PROGRESS], tail=[_PROGRESS],
    disk=DiskStatus(free_bytes=50 * 2**30, total_bytes=500 * 2**30),
    checkpoints=CheckpointStatus(count=3, newest_step=120, newest_verified_step=120, last_size_bytes=2_000_000),
)
# The same run just after the trainer died with an error.
SAMPLE_EXITED = SAMPLE_RUNNING.model_copy(update={
    "trainer": TrainerStatus(pid=4242, alive=False, exit_code=1, launches=1, seconds_running=600.0),
    "new_lines": ["Traceback (most recent call last):", "RuntimeError: boom"],
})
SAMPLES = {"a running": SAMPLE_RUNNING, "an exited": SAMPLE_EXITED}


@dataclass
class LintReport:
    files: int = 0
    valid: list[Playbook] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)      # project playbooks replacing shipped ones

    @property
    def ok(self) -> bool:
        return not self.errors


def lint_paths(paths: list[Path], config: RunConfig | None = None, include_shipped: bool = False,
               shipped_context: bool = False) -> LintReport:
    """Lint the files under `paths`, with the shipped set under them when include_shipped (a run's view).
    shipped_context: the files named alone (`playbooks lint FILE`) are read with the shipped set as a run
    reads them (the names they may inhibit or replace), and only they are reported on."""
    config = config or RunConfig()
    report = LintReport()
    given: set[Path] | None = None
    try:
        playbooks, report.errors, replaced = read_set(paths, include_shipped or shipped_context)
        if shipped_context:
            given = {f.resolve() for f in playbook_files(paths)}
            report.files = len(given)
            # a shipped file named itself (runbook's own repository) replaces nothing
            replaced = [r for r in replaced if Path(str(r.project.source_file)).resolve() != Path(str(r.shipped.source_file)).resolve()]
        else:
            shipped = len(shipped_files()) if include_shipped else 0
            own = [p for p in paths if not (include_shipped and Path(p).resolve() == SHIPPED_DIR)]   # runbook's repo
            report.files = len(playbook_files(own)) + shipped - len(replaced)
    except SourceError as err:
        report.errors += err.messages
        return report
    report.notes = [r.note() for r in replaced]
    problems = set_problems(playbooks)
    report.errors += [problem.message() for problem in problems]
    spoiled = {id(p) for problem in problems for p in problem.spoils}
    for playbook in playbooks:
        assert playbook.source_file is not None   # read_set() reads every playbook from its file
        if given is not None and playbook.source_file.resolve() not in given:
            continue   # the shipped context: linted by runbook's own tests
        tree = load_yaml(playbook.source_file)
        found = runtime_warnings(playbook, config)
        # Over a sandbox budget on the samples is a property of the text, not of the state: an error.
        # So is a value that fails on every sample state, or a change the run config would refuse.
        over = [(loc, w) for loc, w in found if _refused(w)] + config_problems(playbook, config)
        report.errors += [f"{where(playbook.source_file, loc, tree)}: {_key(loc)}: {w}" for loc, w in over]
        report.warnings += [f"{where(playbook.source_file, loc, tree)}: {_key(loc)}: warning: {w}"
                            for loc, w in found if not _refused(w)]
        if id(playbook) not in spoiled and not over:
            report.valid.append(playbook)
    return report


def config_problems(playbook: Playbook, config: RunConfig) -> list[tuple[tuple, str]]:
    """Actions whose planned values can only fail, whatever the state: planned on every sample state, a
    step that cannot be planned on all of them (a non-finite lr, a bad_step that is no number), or
    hyperparameters the run config would refuse (a batch_size that is no multiple of the micro-batch)."""
    problems: list[tuple[tuple, str]] = []
    plans = [plan(playbook, sample, config) for sample in SAMPLES.values()]
    for index, step in enumerate(playbook.actions):
        if "state" in repr(step.params):   # its values depend on what is seen: only the samples' warnings apply
            continue
        planned = [steps[index] for steps in plans if index < len(steps)]
        if planned and all(p.error for p in planned):
            problems.append((("actions", index, step.verb), f"cannot be planned on any state: {planned[0].error}"))
            continue
        for p in planned:
            if not isinstance(p.params, SetHyperparametersParams) or p.error:
                continue
            updates = p.params.updates()
            try:
                type(config).model_validate({**config.model_dump(), **updates})   # its trainer's settings model too
            except ValidationError as err:
                problems.append((("actions", index, step.verb),
                                 f"the run config refuses {updates}: {err.errors()[0]['msg']}"))
                break
    return problems


def _refused(problem: str) -> bool:
    """The sandbox refused it (a budget, an attribute outside plain data): true on any state."""
    return LIMIT_MARK in problem or "SecurityError" in problem


def _key(loc: tuple) -> str:
    return ".".join(str(part) for part in loc)


def runtime_warnings(playbook: Playbook, config: RunConfig) -> list[tuple[tuple, str]]:
    """Expressions that fail (or yield a non-bool condition) on the sample snapshots."""
    warnings: list[tuple[tuple, str]] = []
    for loc, role, source in expressions(playbook):
        if role == "template":  # text with {{ }} inside is rendered at plan time: try it on the samples
            for sample_name, sample in SAMPLES.items():
                try:
                    render_template(source, {"state": sample, "config": config, "attempt": 1})
                except Exception as err:  # noqa: BLE001 - reported as a warning, like expressions
                    warnings.append((loc, f"on {sample_name} sample state: {type(err).__name__}: {err}"))
                    break
            continue
        compiled = compile_expression(source)
        for sample_name, sample in SAMPLES.items():
            context: dict[str, Any] = {"state": sample, "config": config}
            if loc[0] == "actions":
                context["attempt"] = 1  # the planner's extra name for actions: the firing's number in its window
            if role == "condition":
                _, error = evaluate_condition(compiled, context)
            else:
                error = _value_error(playbook, loc, compiled, context)
            if error:
                warnings.append((loc, f"on {sample_name} sample state: {error}"))
                break  # one sample is enough to show the problem
    return warnings


def _value_error(playbook: Playbook, loc: tuple, compiled: Expression, context: dict) -> str | None:
    """Evaluate one computed param and validate it with the action's params model."""
    _, index, verb, key = loc
    try:
        value = compiled.evaluate(**context)
    except Exception as err:  # noqa: BLE001 - a user's expression may raise anything
        return f"{compiled.source}: {type(err).__name__}: {err}"
    params = {k: v for k, v in playbook.actions[index].params.items() if not is_expression(v)}
    try:
        REGISTRY[verb].params.model_validate({**params, key: value})
    except ValidationError as err:
        wrong = [e for e in err.errors() if e["loc"] and e["loc"][0] == key]
        if wrong:
            return f"{compiled.source} gives {value!r}: {wrong[0]['msg']}"
    return None
