"""Matching semantics of the playbook language, on real StateSnapshots through the real matcher and planner."""

from __future__ import annotations

import math

import pytest
from jinja2 import StrictUndefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.language.clauses import MatchContext
from engine.expr.expressions import _ENV, compile_expression
from engine.language.matcher import AttemptHistory, MatchMemory, decide, ordered
from engine.language.planner import plan
from engine.language.playbook import build_playbook
from engine.core.merge import deep_merge
from engine.language.playbook_testing import build_snapshots, run_test
from engine.core.state import StateSnapshot
from engine.core.config import RunConfig

CONFIG = RunConfig()
RUNNING = {"trainer": {"alive": True, "pid": 7}, "metrics": {"step": 100, "loss": 3.0, "loss_median": 3.0}}


def snap(partial: dict | None = None, **fields) -> StateSnapshot:
    return StateSnapshot.model_validate(deep_merge(deep_merge(StateSnapshot().model_dump(), partial or {}), fields))


def playbook(name="rule", match=None, **extra):
    data = {"name": name, "description": f"{name} for a test", "match": match or {"exit": {"nonzero": True}},
            "actions": [{"record": {"note": "seen"}}], **extra}
    return build_playbook(data)


def matches(clause: dict, state: StateSnapshot, config: RunConfig = CONFIG) -> bool:
    return playbook(match=clause).match.check(MatchContext(state=state, config=config))


def run(playbooks, states, history=None, config=CONFIG):
    """Feed the states in order; the outcome of each observation."""
    memory, history, outcomes = MatchMemory(), history or AttemptHistory(), []
    for state in states:
        outcome = decide(state, config, playbooks, memory, history)
        memory = outcome.memory
        outcomes.append(outcome)
    return outcomes


# --- each clause kind -----------------------------------------------------------------------------
CLAUSE_CASES = [
    ("log new", {"log": {"pattern": "CUDA out of memory"}},
     {"new_lines": ["step 3", "torch.OutOfMemoryError: CUDA out of memory."]},
     {"new_lines": ["step 3"], "tail": ["CUDA out of memory (an old line: scope new ignores the tail)"]}),
    ("log tail, ignore_case", {"log": {"pattern": "no space left", "scope": "tail", "ignore_case": True}},
     {"tail": ["OSError: [Errno 28] No space left on device"]},
     {"new_lines": ["No space left on device"], "tail": ["all good"]}),
    ("metric >", {"metric": {"name": "loss", "op": ">", "value": 5}},
     {"metrics": {"loss": 5.5}}, {"metrics": {"loss": 4.0}}),
    ("metric is_nan", {"metric": {"name": "loss", "op": "is_nan"}},
     {"metrics": {"loss": math.nan}}, {"metrics": {"loss": None}}),
    ("metric ratio to median", {"metric": {"name": "loss", "op": "ratio_to_median_above", "value": 3}},
     {"metrics": {"loss": 10.0, "loss_median": 3.0}}, {"metrics": {"loss": 8.0, "loss_median": 3.0}}),
    ("metric min_step", {"metric": {"name": "loss", "op": ">", "value": 5, "min_step": 50}},
     {"metrics": {"loss": 9.0, "step": 60}}, {"metrics": {"loss": 9.0, "step": 10}}),
    ("exit signal", {"exit": {"signals": ["SIGTERM"]}},
     {"trainer": {"alive": False, "exit_code": -15, "signal": "SIGTERM"}}, {"trainer": {"alive": False, "exit_code": 1}}),
    ("exit code", {"exit": {"codes": [143]}},
     {"trainer": {"alive": False, "exit_code": 143}}, {"trainer": {"alive": True, "exit_code": None}}),
    ("exit nonzero", {"exit": {"nonzero": True}},
     {"trainer": {"alive": False, "exit_code": 1}}, {"trainer": {"alive": False, "exit_code": 0}}),
    ("stalled", {"stalled": {"seconds": 60}},
     {"trainer": {"alive": True}, "seconds_since_progress": 61}, {"trainer": {"alive": False}, "seconds_since_progress": 600}),
    ("disk percent", {"disk": {"free_percent_below": 10}},
     {"disk": {"free_bytes": 5, "total_bytes": 100}}, {"disk": {"free_bytes": 50, "total_bytes": 100}}),
    ("disk vs checkpoint size", {"disk": {"free_below_checkpoint_factor": 2}},
     {"disk": {"free_bytes": 15, "total_bytes": 100}, "checkpoints": {"last_size_bytes": 10}},
     {"disk": {"free_bytes": 25, "total_bytes": 100}, "checkpoints": {"last_size_bytes": 10}}),
    ("checkpoint corrupt", {"checkpoint": {"corrupt": True}},
     {"checkpoints": {"corrupt_steps": [20]}}, {"checkpoints": {"corrupt_steps": []}}),
    ("throughput", {"throughput": {"below_baseline_fraction": 0.5}},
     {"metrics": {"tokens_per_sec": 100.0, "baseline_tokens_per_sec": 1000.0}},
     {"metrics": {"tokens_per_sec": 900.0, "baseline_tokens_per_sec": 1000.0}}),
    ("expr", {"expr": "state.metrics.val_loss is not none and state.metrics.val_loss > 2 * config.lr * 1000"},
     {"metrics": {"val_loss": 7.0}}, {"metrics": {"val_loss": 5.0}}),
    ("any", {"any": [{"exit": {"codes": [137]}}, {"log": {"pattern": "Killed"}}]},
     {"new_lines": ["Killed"]}, {"new_lines": ["fine"]}),
    ("all", {"all": [{"exit": {"nonzero": True}}, {"log": {"pattern": "NCCL", "scope": "tail"}}]},
     {"trainer": {"exit_code": 1}, "tail": ["NCCL error"]}, {"trainer": {"exit_code": 1}, "tail": ["ValueError"]}),
    ("not", {"all": [{"exit": {"nonzero": True}}, {"not": {"exit": {"signals": ["SIGTERM"]}}}]},
     {"trainer": {"exit_code": 1}}, {"trainer": {"exit_code": -15, "signal": "SIGTERM"}}),
]


@pytest.mark.parametrize("clause, hit, miss", [c[1:] for c in CLAUSE_CASES], ids=[c[0] for c in CLAUSE_CASES])
def test_each_clause_matches_its_symptom_and_nothing_else(clause, hit, miss):
    assert matches(clause, snap(hit))
    assert not matches(clause, snap(miss))


@pytest.mark.parametrize("clause, hit, miss", [c[1:] for c in CLAUSE_CASES], ids=[c[0] for c in CLAUSE_CASES])
def test_explain_agrees_with_the_decision(clause, hit, miss):
    rule = playbook(match=clause)
    for state, expected in ((snap(hit), True), (snap(miss), False)):
        [outcome] = run([rule], [state])
        explanation = rule.match.explain(MatchContext(state=state, config=CONFIG))
        assert explanation.matched is expected is (outcome.decision is not None)


def test_tail_index_gives_the_same_first_line_as_a_scan():
    rules = [playbook(f"tail-{i}", {"log": {"pattern": p, "scope": "tail"}}) for i, p in enumerate(["err(or)?", r"^step \d*7$", "x"])]
    lines = [f"step {i}" for i in range(300)] + ["error: a", "err: b"]
    memory = MatchMemory()
    for end in range(1, len(lines) + 1, 7):
        state = snap(tail=lines[max(0, end - 200):end])
        outcome = decide(state, CONFIG, rules, memory, AttemptHistory())
        memory = MatchMemory()  # judge every observation on its own
        scanned = [r.name for r in ordered(rules) if r.match.check(MatchContext(state=state, config=CONFIG))]
        assert list(outcome.decision.matched if outcome.decision else ()) == scanned
        for rule in rules:  # the first matching line, not just any
            ctx_lines = [line for line in state.tail if rule.match.regex.search(line)]
            assert rule.match.explain(MatchContext(state=state, config=CONFIG)).actual == (repr(ctx_lines[0]) if ctx_lines else "None")


# --- persistence ----------------------------------------------------------------------------------
def test_persistence_by_observations_needs_consecutive_matches():
    rule = playbook(match={"metric": {"name": "loss", "op": "is_nan"}}, **{"for": {"observations": 3}})
    nan, ok = snap(metrics={"loss": math.nan}), snap(metrics={"loss": 2.0})
    outcomes = run([rule], [nan, nan, ok, nan, nan, nan])
    assert [o.decision is not None for o in outcomes] == [False, False, False, False, False, True]


def test_persistence_by_seconds_counts_from_the_first_match():
    rule = playbook(match={"stalled": {"seconds": 5}}, **{"for": {"seconds": "30s"}})
    states = [snap(time=t, trainer={"alive": True}, seconds_since_progress=10) for t in (100, 110, 129, 130)]
    outcomes = run([rule], states)
    assert [o.decision is not None for o in outcomes] == [False, False, False, True]


def test_a_firing_starts_the_streak_afresh():
    rule = playbook(match={"exit": {"nonzero": True}}, **{"for": {"observations": 2}})
    crash = snap(trainer={"exit_code": 1})
    outcomes = run([rule], [crash] * 4)
    assert [o.decision is not None for o in outcomes] == [False, True, False, True]


# --- priority and inhibition ----------------------------------------------------------------------
def test_the_highest_priority_wins_and_ties_go_by_name():
    crash = snap(trainer={"exit_code": 1})
    low, high = playbook("low", priority=10), playbook("high", priority=90)
    [outcome] = run([low, high], [crash])
    assert outcome.decision.playbook.name == "high" and outcome.decision.matched == ("high", "low")
    [outcome] = run([playbook("zeta"), playbook("alpha")], [crash])
    assert outcome.decision.playbook.name == "alpha"


def test_an_inhibiting_playbook_silences_a_higher_priority_one():
    preempt = playbook("preempt", {"exit": {"signals": ["SIGTERM"]}}, priority=10, inhibits=["crash"])
    crash = playbook("crash", {"exit": {"nonzero": True}}, priority=90)
    [outcome] = run([crash, preempt], [snap(trainer={"exit_code": -15, "signal": "SIGTERM"})])
    assert outcome.decision.playbook.name == "preempt" and outcome.decision.inhibited == ("crash",)
    [outcome] = run([crash, preempt], [snap(trainer={"exit_code": 1})])
    assert outcome.decision.playbook.name == "crash"


# --- limits ---------------------------------------------------------------------------------------
def test_max_attempts_in_the_window_escalates():
    rule = playbook(limits={"max_attempts": 2, "window": "1h"})
    crash = snap(time=10_000.0, trainer={"exit_code": 1})
    recent = AttemptHistory().record("rule", 8_000.0).record("rule", 9_000.0)
    [outcome] = run([rule], [crash], recent)
    assert outcome.decision.kind == "escalate" and "max_attempts 2" in outcome.decision.reason
    old = AttemptHistory().record("rule", 1_000.0).record("rule", 9_000.0)  # one left the window
    [outcome] = run([rule], [crash], old)
    assert outcome.decision.kind == "recover"


def test_cooldown_with_backoff_waits():
    rule = playbook(limits={"max_attempts": 5, "cooldown": "1m", "backoff": 2})
    once = AttemptHistory().record("rule", 1_000.0)
    twice = once.record("rule", 1_030.0)
    assert run([rule], [snap(time=1_050.0, trainer={"exit_code": 1})], once)[0].decision.kind == "wait"
    assert run([rule], [snap(time=1_061.0, trainer={"exit_code": 1})], once)[0].decision.kind == "recover"
    # second firing in the window: 60 s x 2
    assert run([rule], [snap(time=1_140.0, trainer={"exit_code": 1})], twice)[0].decision.kind == "wait"
    assert run([rule], [snap(time=1_151.0, trainer={"exit_code": 1})], twice)[0].decision.kind == "recover"


def test_the_global_circuit_breaker_counts_every_playbook():
    config = RunConfig.model_validate({"watch": {"max_recoveries_per_hour": 2}})
    history = AttemptHistory().record("other", 5_000.0).record("third", 6_000.0)
    [outcome] = run([playbook()], [snap(time=7_000.0, trainer={"exit_code": 1})], history, config)
    assert outcome.decision.kind == "escalate" and "circuit breaker" in outcome.decision.reason


# --- expressions fail closed ----------------------------------------------------------------------
def test_an_expression_error_fails_closed_and_is_reported():
    rule = playbook(match={"expr": "state.metrics.loss > 3"})
    [outcome] = run([rule], [snap(metrics={"loss": None})])
    assert outcome.decision is None
    assert len(outcome.errors) == 1 and "TypeError" in outcome.errors[0]


def test_a_non_bool_condition_fails_closed():
    rule = playbook(match={"expr": "state.metrics.loss"})
    [outcome] = run([rule], [snap(metrics={"loss": 5.0})])
    assert outcome.decision is None and "must yield true/false" in outcome.errors[0]


def _outcome(call):
    from jinja2 import Undefined

    try:
        value = call()
    except Exception as err:  # noqa: BLE001 - the kind of failure is what is compared
        return "error", type(err).__name__, str(err)
    return ("undefined", str(value._undefined_hint)) if isinstance(value, Undefined) else ("value", value)


# (expression, evaluated without jinja's per-call set-up?) - both paths must give what plain jinja gives
EXPRESSIONS = [
    ("state.metrics.loss is not none and state.metrics.loss > 2 * (state.metrics.loss_median or 1)", True),
    ("0 < state.metrics.loss < 5", True), ("5 < state.metrics.loss < 1 < missing", True),
    ("state.trainer.exit_code in [137, 143, -9]", True), ("state.trainer.exit_code not in (1, 2)", True),
    ("state.metrics.loss if state.metrics.loss is not none else -1", True), ("-state.metrics.loss + +1", True),
    ("state.metrics.step // 3 % 2 ** 3 - 1 / 4", True), ("1 / 0", True), ("state.metrics.loss > 3", True),
    ("state.tail[-1]", True), ("state['trainer']['alive']", True), ("config.trainer.env['X']", True),
    ("missing_name", True), ("missing_name is defined", True), ("state.metrics.los > 3", True),
    ("state.new_lines.append", True), ("attempt >= 2 and not state.trainer.alive", True),
    ("state.metrics.val_loss is number", True), ("config.micro_batch_size // 2", True),
    ("state.disk.free_percent < 30 and config.watch.max_recoveries_per_hour == 12", True),
    ("state.metrics.loss_history", True), ("state.metrics.loss * 10", True), ("state.trainer", True),
    ("isnan(state.metrics.loss) or median(state.metrics.loss_history) > 1", False),
    ("state | attr('__class__')", False), ("state.new_lines.append('x')", False), ("state.tail[:2]", False),
]
STATES = [
    snap(RUNNING, metrics={"loss_history": [1.0, 2.0, 4.0], "val_loss": 3.5}, disk={"free_bytes": 1, "total_bytes": 4},
         tail=["a", "b", "c"]),
    snap(trainer={"alive": False, "exit_code": 143}, disk={"free_bytes": 3, "total_bytes": 4}),
]


@pytest.mark.parametrize("source, direct", EXPRESSIONS, ids=[e[0] for e in EXPRESSIONS])
def test_expressions_give_what_plain_jinja_gives(source, direct):
    expression = compile_expression(source)
    assert (expression._direct is not None) is direct
    plain = ImmutableSandboxedEnvironment(undefined=StrictUndefined)  # a check at every attribute access
    plain.globals.update(_ENV.globals)
    reference = plain.compile_expression(source, undefined_to_none=False)
    for state in STATES:
        names = {"state": state, "config": CONFIG, "attempt": 2}
        assert _outcome(lambda: expression.evaluate(**names)) == _outcome(lambda: reference(**names))


def test_sandbox_escapes_are_refused_at_load():
    for source in ("().__class__", "state.__dict__", "config['_secret']"):
        with pytest.raises(ValueError, match="not allowed in the sandbox"):
            playbook(match={"expr": source})


# --- planning -------------------------------------------------------------------------------------
def test_planner_computes_typed_params_and_applies_guards():
    rule = build_playbook({
        "name": "oom-like", "description": "d", "match": {"exit": {"nonzero": True}},
        "actions": [
            {"escalate": {"reason": "nothing left to halve"}, "if": "config.micro_batch_size <= 1"},
            {"set_hyperparameters": {"micro_batch_size": "{{ config.micro_batch_size // 2 }}", "lr": "{{ config.lr / 2 }}"}},
            {"stop": {}, "if": "state.metrics.loss > 3"},  # loss unknown: the guard errors, the step is skipped
        ],
    })
    config = RunConfig.model_validate({"micro_batch_size": 8, "batch_size": 16, "lr": 0.004})
    steps = plan(rule, snap(), config)
    assert steps[0].skipped == "if: config.micro_batch_size <= 1 is false"
    params = steps[1].params
    assert params.micro_batch_size == 4 and type(params.micro_batch_size) is int and params.lr == pytest.approx(0.002)
    assert steps[2].skipped and "TypeError" in steps[2].skipped
    at_one = plan(rule, snap(), RunConfig.model_validate({"micro_batch_size": 1, "batch_size": 16}))
    assert at_one[0].skipped is None and at_one[1].error  # 1 // 2 = 0 is refused by the params model


# --- playbook tests -------------------------------------------------------------------------------
def test_observations_advance_time_and_build_the_tail():
    snapshots = build_snapshots([{"new_lines": ["a"]}, {"new_lines": ["b"], "time": 50}, {}])
    assert [s.observation for s in snapshots] == [1, 2, 3]
    assert [s.time for s in snapshots] == [0.0, 50.0, 51.0]
    assert snapshots[2].tail == ["a", "b"] and snapshots[2].new_lines == []


def test_a_playbook_test_reports_a_wrong_expectation():
    rule = build_playbook({
        "name": "crash", "description": "d", "match": {"exit": {"nonzero": True}}, "for": {"observations": 2},
        "actions": [{"verify_checkpoints": {}}, {"resume": {}}],
        "tests": [{"name": "twice", "observations": [{"trainer": {"exit_code": 1}}] * 2,
                   "expect_fires_at": 1, "expect_actions": ["resume"]}],
    })
    result = run_test(rule, rule.tests[0])
    assert not result.passed and result.fired_at == 2
    assert result.problems == ["expected to fire at observation 1, fired at observation 2"]
    right = rule.tests[0].model_copy(update={"expect_fires_at": 2, "expect_actions": ["verify_checkpoints", "resume"]})
    assert run_test(rule, right).passed


def test_a_playbook_test_sees_the_playbooks_that_inhibit_it():
    preempt = playbook("preempt", {"exit": {"signals": ["SIGTERM"]}}, inhibits=["crash"])
    crash = build_playbook({
        "name": "crash", "description": "d", "match": {"exit": {"nonzero": True}}, "actions": [{"stop": {}}],
        "tests": [{"name": "not on SIGTERM", "observations": [{"trainer": {"exit_code": -15, "signal": "SIGTERM"}}],
                   "expect_fires_at": None}],
    })
    unrelated = playbook("unrelated", priority=100)
    assert not run_test(crash, crash.tests[0]).passed  # alone, a SIGTERM is a non-zero exit
    result = run_test(crash, crash.tests[0], [preempt, unrelated])
    assert result.passed and result.notes == ["observation 1: 'preempt' decided recover"]
