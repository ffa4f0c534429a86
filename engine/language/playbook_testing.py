"""Run the `tests:` written next to a playbook: observations in, the first firing and its plan out.

Pure: no files, no processes, no clocks. Semantics (also in docs/playbooks.md):

- Each observation is a partial snapshot, deep-merged onto a default `StateSnapshot` (trainer not
  alive, no metrics, empty disk). Observations are independent: nothing carries over from the
  previous one, except that `tail`, when not given, is the last 200 of all `new_lines` so far
  (what the observer builds in a real run).
- `observation` is the 1-based index and `time` advances by 1 s per observation (from 0), unless an
  observation gives them; a given `time` is where the next observations continue from.
  `hang_timeout_s` defaults to the config's `watch.hang_timeout_s` (the observer's value before it
  has measured the run's own progress gaps), `startup_timeout_s` to `watch.startup_timeout_s`.
- The test's `config` is deep-merged onto the defaults of the run config.
- The playbook is matched together with the playbooks it inhibits and the playbooks that inhibit it
  (its siblings in the same folder), and with nothing else: a test checks this rule and the
  inhibitions it takes part in, and does not change when an unrelated playbook is added. A decision
  made for a related playbook is recorded in the attempt history (as the supervisor would) and the
  test goes on.
- The result is the first observation at which a decision of kind `recover` or `escalate` names
  this playbook (a `wait` in cooldown does not count), and the verbs the planner plans for it,
  leaving out steps whose `if:` guard is false. A step that cannot be planned (its computed params
  are invalid) fails the test, unless an `escalate` step before it ends the recovery first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from pydantic import ValidationError

from engine.core.merge import deep_merge
from engine.language.matcher import AttemptHistory, MatchMemory, decide
from engine.language.planner import PlannedStep, plan
from engine.language.playbook import Playbook, PlaybookTest
from engine.core.state import StateSnapshot
from engine.core.config import RunConfig

OBSERVATION_INTERVAL_S = 1.0
TAIL_LINES = 200
FIRING_KINDS = ("recover", "escalate")


def _describe(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    reason = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{where}: {reason}{more}"


def build_snapshots(observations: Iterable[dict[str, Any]], config: RunConfig | None = None) -> list[StateSnapshot]:
    """The test's partial observations as full snapshots; ValueError names the observation."""
    default = StateSnapshot().model_dump()
    if config is not None:
        default["hang_timeout_s"] = config.watch.hang_timeout_s
        default["startup_timeout_s"] = config.watch.startup_timeout_s
        default["save_timeout_s"] = config.watch.save_timeout_s
    snapshots: list[StateSnapshot] = []
    seen_lines: list[str] = []
    time = -OBSERVATION_INTERVAL_S
    for number, partial in enumerate(observations, start=1):
        if not isinstance(partial, dict):
            raise ValueError(f"observation {number}: must be a mapping of snapshot fields")
        time = float(partial.get("time", time + OBSERVATION_INTERVAL_S))
        seen_lines = (seen_lines + list(partial.get("new_lines") or []))[-TAIL_LINES:]
        data = deep_merge(default, {"observation": number, "time": time, "tail": list(seen_lines)})
        try:
            snapshots.append(StateSnapshot.model_validate(deep_merge(data, partial)))
        except ValidationError as err:
            raise ValueError(f"observation {number}: {_describe(err)}") from None
    return snapshots


def build_config(overrides: dict[str, Any]) -> RunConfig:
    """Tests are hermetic: the run config's defaults plus the test's own overrides, never a project's file."""
    try:
        return RunConfig.model_validate(deep_merge(RunConfig().model_dump(), overrides or {}))
    except ValidationError as err:
        raise ValueError(f"config: {_describe(err)}") from None


def related_playbooks(playbook: Playbook, siblings: Iterable[Playbook]) -> list[Playbook]:
    """The siblings that `playbook` inhibits or that inhibit it."""
    return [
        p for p in siblings
        if p.name != playbook.name and (p.name in playbook.inhibits or playbook.name in p.inhibits)
    ]


@dataclass
class TestResult:
    __test__ = False  # not a pytest test class, despite the name

    playbook: str
    test: str
    expected_at: int | None
    fired_at: int | None = None
    kind: str | None = None                       # recover / escalate, when it fired
    actions: list[str] | None = None              # planned verbs (guards applied), when it fired
    problems: list[str] = field(default_factory=list)   # why the test fails
    notes: list[str] = field(default_factory=list)      # expression errors, other playbooks' decisions

    @property
    def passed(self) -> bool:
        return not self.problems


def _at(index: int | None) -> str:
    return "never" if index is None else f"at observation {index}"


def run_test(playbook: Playbook, test: PlaybookTest, siblings: Iterable[Playbook] = ()) -> TestResult:
    result = TestResult(playbook.name, test.name, test.expect_fires_at)
    try:
        config = build_config(test.config)
        snapshots = build_snapshots(test.observations, config)
    except ValueError as err:
        result.problems.append(str(err))
        return result
    pool = [playbook, *related_playbooks(playbook, siblings)]
    memory, history = MatchMemory(), AttemptHistory()
    for number, snapshot in enumerate(snapshots, start=1):
        outcome = decide(snapshot, config, pool, memory, history)
        memory = outcome.memory
        for error in outcome.errors:
            note = f"expression error (fails closed): {error}"
            if note not in result.notes:
                result.notes.append(note)
        decision = outcome.decision
        if decision is None or decision.kind not in FIRING_KINDS:
            continue
        if decision.playbook.name != playbook.name:
            result.notes.append(f"observation {number}: '{decision.playbook.name}' decided {decision.kind}")
            history = history.record(decision.playbook.name, snapshot.time, snapshot.metrics.step)
            continue
        result.fired_at, result.kind = number, decision.kind
        steps = plan(playbook, snapshot, config)
        result.actions = [s.verb for s in steps if s.skipped is None]
        result.problems += _unplannable(steps)
        break
    if result.fired_at != test.expect_fires_at:
        result.problems.insert(0, f"expected to fire {_at(test.expect_fires_at)}, fired {_at(result.fired_at)}")
    elif test.expect_actions is not None and result.fired_at is not None and result.actions != test.expect_actions:
        result.problems.insert(0, f"expected actions {test.expect_actions}, planned {result.actions}")
    return result


def _unplannable(steps: Iterable[PlannedStep]) -> list[str]:
    """Steps that cannot be planned and would be reached (the supervisor stops after an escalate)."""
    problems = []
    for step in steps:
        if step.error:
            problems.append(f"step {step.index + 1} ({step.verb}) cannot be planned: {step.error}")
        elif step.verb == "escalate" and step.skipped is None:
            break
    return problems


def run_playbook_tests(playbooks: list[Playbook]) -> list[TestResult]:
    """Every test of every playbook, each matched with its related siblings from `playbooks`."""
    return [run_test(p, t, playbooks) for p in playbooks for t in p.tests]


__all__ = ["TestResult", "build_config", "build_snapshots", "related_playbooks", "run_playbook_tests", "run_test"]
