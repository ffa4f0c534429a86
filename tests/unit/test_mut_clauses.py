"""Each clause kind at its edges and in its own words (what `explain` prints), written against the mutants
benchmarks/bench_mutation.py found alive (engine/language/clauses/)."""

from __future__ import annotations

import math

import pytest

from engine.language.clauses import MatchContext
from tests.language.test_playbook_language import CONFIG, playbook, snap


def clause(spec: dict):
    return playbook(match=spec).match


def explain(spec: dict, **state):
    return clause(spec).explain(MatchContext(state=snap(**state), config=CONFIG))


def check(spec: dict, **state) -> bool:
    return clause(spec).check(MatchContext(state=snap(**state), config=CONFIG))


# --- metric ---------------------------------------------------------------------------------------
def test_metric_min_step_counts_from_that_step():
    spec = {"metric": {"name": "loss", "op": ">", "value": 5, "min_step": 10}}
    assert not check(spec, metrics={"loss": 9.0, "step": 9})
    assert check(spec, metrics={"loss": 9.0, "step": 10})
    assert not check(spec, metrics={"loss": 9.0, "step": None})
    e = explain(spec, metrics={"loss": 9.0, "step": 10})
    assert (e.expected, e.actual) == ("loss > 5.0 (from step 10)", "9.0")


def test_metric_consecutive_needs_the_last_n_logged_values_all():
    spec = {"metric": {"name": "loss", "op": ">", "value": 5, "consecutive": 3}}
    assert check(spec, metrics={"loss_history": [1.0, 6.0, 7.0, 8.0]})       # only the last 3 count
    assert not check(spec, metrics={"loss_history": [9.0, 4.0, 7.0, 8.0]})    # the oldest of them fails it
    assert not check(spec, metrics={"loss_history": [9.0, 7.0, 8.0, 4.0]})    # the newest fails it
    assert not check(spec, metrics={"loss_history": [7.0, 8.0]})            # fewer than 3 logged
    e = explain(spec, metrics={"loss_history": [6.0, 7.0, 8.0]})
    assert (e.expected, e.actual, e.matched) == ("loss > 5.0, for the last 3 logged values", "[6.0, 7.0, 8.0]", True)


@pytest.mark.parametrize("op,value,loss,median,best,holds", [
    ("ratio_to_median_above", 3, 10.0, 3.0, 1.0, True), ("ratio_to_median_above", 3, 9.0, 3.0, 1.0, False),
    ("ratio_to_median_below", 0.5, 1.0, 3.0, 1.0, True), ("ratio_to_median_below", 0.5, 2.0, 3.0, 1.0, False),
    ("ratio_to_best_above", 3, 4.0, 4.0, 1.0, True), ("ratio_to_best_above", 3, 4.0, 1.0, 2.0, False),
    ("ratio_to_median_above", 3, 10.0, None, 1.0, False), ("ratio_to_median_above", 3, None, 3.0, 1.0, False),
    ("ratio_to_median_above", 3, 10.0, 0.0, 1.0, False),
])
def test_metric_ratio_ops_compare_with_their_own_baseline(op, value, loss, median, best, holds):
    spec = {"metric": {"name": "loss", "op": op, "value": value}}
    assert check(spec, metrics={"loss": loss, "loss_median": median, "loss_best_median": best}) is holds


def test_metric_ratio_words_and_a_metric_without_a_baseline():
    assert explain({"metric": {"name": "loss", "op": "ratio_to_median_above", "value": 3}}).expected == "loss / rolling median > 3.0"
    assert explain({"metric": {"name": "loss", "op": "ratio_to_median_below", "value": 0.5}}).expected == "loss / rolling median < 0.5"
    assert explain({"metric": {"name": "loss", "op": "ratio_to_best_above", "value": 2}}).expected == "loss / lowest rolling median so far > 2.0"
    assert explain({"metric": {"name": "loss", "op": "not_finite"}}).expected == "loss not_finite"
    # only loss has a baseline: a ratio op on another metric never matches
    assert not check({"metric": {"name": "grad_norm", "op": "ratio_to_median_above", "value": 3}},
                     metrics={"grad_norm": 100.0, "loss_median": 1.0})


@pytest.mark.parametrize("op,value,holds", [("is_nan", math.nan, True), ("is_nan", math.inf, False), ("is_inf", math.inf, True),
                                            ("is_inf", 1.0, False), ("not_finite", -math.inf, True), ("not_finite", 2.0, False)])
def test_metric_unary_ops(op, value, holds):
    assert check({"metric": {"name": "loss", "op": op}}, metrics={"loss": value}) is holds


# --- exit -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,trainer,holds", [
    ({"codes": [3]}, {"alive": False, "exit_code": 3}, True),
    ({"codes": [3]}, {"alive": False, "exit_code": 4}, False),
    ({"codes": [3]}, {"alive": True, "exit_code": 3}, False),
    ({"signals": ["SIGTERM"]}, {"alive": False, "exit_code": 143}, True),
    ({"signals": ["SIGTERM"]}, {"alive": False, "exit_code": None, "signal": None}, False),
    ({"nonzero": True}, {"alive": False, "exit_code": 0}, False),
    ({"nonzero": True}, {"alive": False, "exit_code": 2}, True),
    ({"nonzero": True}, {"alive": False, "exit_code": None, "signal": "SIGKILL"}, True),
    ({"nonzero": True}, {"alive": False, "exit_code": None, "signal": None}, False),
    ({"unknown": True}, {"alive": False, "exit_code": None, "signal": None}, True),
    ({"unknown": True}, {"alive": False, "exit_code": None, "signal": "SIGKILL"}, False),
    ({"unknown": True}, {"alive": False, "exit_code": 1}, False),
])
def test_exit_holds_exactly_for_its_codes_signals_and_kinds(spec, trainer, holds):
    assert check({"exit": spec}, trainer=trainer) is holds
    assert explain({"exit": spec}, trainer=trainer).matched is holds


def test_exit_in_words():
    assert explain({"exit": {"codes": [1], "signals": ["SIGKILL"]}}).expected == "trainer exited with code in [1] or signal in ['SIGKILL']"
    assert explain({"exit": {"nonzero": True, "unknown": True}}).expected == "trainer exited with non-zero exit or an unknown exit status"
    assert explain({"exit": {}}).expected == "trainer exited with (nothing)"
    e = explain({"exit": {"codes": [1]}}, trainer={"alive": True})
    assert (e.matched, e.actual) == (False, "None")


# --- stalled --------------------------------------------------------------------------------------
def test_stalled_holds_from_exactly_its_limit():
    live = {"alive": True, "phase": "training"}
    assert check({"stalled": {"seconds": 30}}, trainer=live, seconds_since_progress=30)
    assert not check({"stalled": {"seconds": 30}}, trainer=live, seconds_since_progress=29.9)
    assert not check({"stalled": {"seconds": 30}}, trainer={"alive": False}, seconds_since_progress=99)
    e = explain({"stalled": {"seconds": 30}}, trainer=live, seconds_since_progress=31)
    assert (e.expected, e.actual) == ("alive trainer without progress for >= 30 s", "31.0")
    assert explain({"stalled": {}}, trainer=live, hang_timeout_s=45).expected == "alive trainer without progress for >= 45 s"


@pytest.mark.parametrize("phase,words", [
    ("startup", "alive trainer in start-up without a sign of life for >= 30 s, or in start-up for >= 600 s"),
    ("saving", "alive trainer in a save without a sign of life for >= 30 s, or saving for >= 900 s"),
    ("validating", "alive trainer in its first validation without a sign of life for >= 30 s, or validating for >= 900 s"),
])
def test_stalled_in_words_per_phase(phase, words):
    e = explain({"stalled": {"seconds": 30}}, trainer={"alive": True, "phase": phase, "seconds_since_activity": 5},
                startup_timeout_s=600, save_timeout_s=900, seconds_since_progress=40)
    assert e.expected == words and not e.matched
    what = {"startup": "start-up", "saving": "save", "validating": "first validation"}[phase]
    assert e.actual == f"{what} without a sign of life: 5 s"


# --- disk, throughput, checkpoint -----------------------------------------------------------------
def test_disk_limits_are_strict_and_unknown_space_never_matches():
    assert check({"disk": {"free_bytes_below": 100}}, disk={"total_bytes": 1000, "free_bytes": 99})
    assert not check({"disk": {"free_bytes_below": 100}}, disk={"total_bytes": 1000, "free_bytes": 100})
    assert not check({"disk": {"free_bytes_below": 100}}, disk={"total_bytes": 0, "free_bytes": 0})
    assert check({"disk": {"free_percent_below": 10}}, disk={"total_bytes": 1000, "free_bytes": 95})
    assert not check({"disk": {"free_percent_below": 10}}, disk={"total_bytes": 1000, "free_bytes": 100})
    factor = {"disk": {"free_below_checkpoint_factor": 2}}
    assert check(factor, disk={"total_bytes": 1000, "free_bytes": 199}, checkpoints={"last_size_bytes": 100})
    assert not check(factor, disk={"total_bytes": 1000, "free_bytes": 200}, checkpoints={"last_size_bytes": 100})
    assert not check(factor, disk={"total_bytes": 1000, "free_bytes": 1}, checkpoints={"last_size_bytes": 0})
    e = explain({"disk": {"free_percent_below": 10}}, disk={"total_bytes": 1000, "free_bytes": 95})
    assert (e.expected, e.actual) == ("free < 10.0%", "9.5")
    assert explain(factor, checkpoints={"last_size_bytes": 100}).expected == "free < 200.0 bytes"


def test_throughput_below_a_fraction_of_the_baseline():
    spec = {"throughput": {"below_baseline_fraction": 0.5}}
    assert check(spec, metrics={"tokens_per_sec": 49.0, "baseline_tokens_per_sec": 100.0})
    assert not check(spec, metrics={"tokens_per_sec": 50.0, "baseline_tokens_per_sec": 100.0})
    assert not check(spec, metrics={"tokens_per_sec": 1.0, "baseline_tokens_per_sec": None})
    assert not check(spec, metrics={"tokens_per_sec": None, "baseline_tokens_per_sec": 100.0})
    assert explain(spec).expected == "tokens/s < 0.5 x baseline"


def test_checkpoint_corrupt_and_not():
    assert check({"checkpoint": {"corrupt": True}}, checkpoints={"corrupt_steps": [10]})
    assert not check({"checkpoint": {"corrupt": True}}, checkpoints={"corrupt_steps": []})
    assert check({"checkpoint": {"corrupt": False}}, checkpoints={"corrupt_steps": []})
    assert explain({"checkpoint": {"corrupt": False}}).expected == "no corrupt checkpoint"
    assert explain({"checkpoint": {"corrupt": True}}).expected == "a corrupt checkpoint"


# --- log, expr, combinators -----------------------------------------------------------------------
def test_log_takes_the_first_matching_line_of_its_scope():
    spec = {"log": {"pattern": "err", "scope": "new"}}
    e = explain(spec, new_lines=["ok", "err one", "err two"], tail=["err old"])
    assert (e.matched, e.actual, e.expected) == (True, "'err one'", "a new line matching /err/")
    assert not check({"log": {"pattern": "ERR"}}, new_lines=["err"])
    assert check({"log": {"pattern": "ERR", "ignore_case": True}}, new_lines=["err"])


def test_expr_fails_closed_and_says_why():
    e = explain({"expr": "state.metrics.loss > 1"}, metrics={"loss": None})
    assert (e.matched, e.actual) == (False, "state.metrics.loss > 1: TypeError: '>' not supported between instances of 'NoneType' and 'int'")
    e = explain({"expr": "state.metrics.loss"}, metrics={"loss": 2.0})
    assert (e.matched, e.actual) == (False, "state.metrics.loss: must yield true/false, got float 2.0")
    ctx = MatchContext(state=snap(metrics={"loss": None}), config=CONFIG)
    assert not clause({"expr": "state.metrics.loss > 1"}).check(ctx) and len(ctx.errors) == 1   # the error is logged
    assert check({"expr": "state.metrics.loss > 1"}, metrics={"loss": 2.0})
    assert explain({"expr": "state.metrics.loss > 1"}, metrics={"loss": 2.0}).actual == "True"


def test_combinators_in_words_and_verdicts():
    crash, clean = {"alive": False, "exit_code": 1}, {"alive": False, "exit_code": 0}
    both = {"all": [{"exit": {"nonzero": True}}, {"log": {"pattern": "x", "scope": "tail"}}]}
    either = {"any": [{"exit": {"nonzero": True}}, {"log": {"pattern": "x", "scope": "tail"}}]}
    negated = {"not": {"exit": {"nonzero": True}}}
    assert check(both, trainer=crash, tail=["x"]) and not check(both, trainer=crash, tail=["y"])
    assert check(either, trainer=clean, tail=["x"]) and not check(either, trainer=clean, tail=["y"])
    assert check(negated, trainer=clean) and not check(negated, trainer=crash)
    assert [explain(c, trainer=crash, tail=["y"]).matched for c in (both, either, negated)] == [False, True, False]
    assert [explain(c).expected for c in (both, either, negated)] == ["every clause", "at least one clause",
                                                                      "the clause below does not match"]


# --- second round: what the first round left alive ---------------------------------------------------
def test_a_clause_is_a_mapping_with_exactly_one_kind():
    from engine.language.playbook import build_playbook
    from pydantic import TypeAdapter

    from engine.language.clauses import AnyClause, LogClause

    for bad in ({"log": {"pattern": "x"}, "exit": {"nonzero": True}}, {"log": {"pattern": "x"}, "note": 1}, {"nothing": 1}):
        with pytest.raises(ValueError, match="a clause is a mapping with exactly one of"):
            build_playbook({"name": "r", "description": "d", "match": bad, "actions": [{"record": {"note": "n"}}]})
    made = LogClause(log={"pattern": "x"})
    assert TypeAdapter(AnyClause).validate_python(made) == made     # a clause object passes as itself


def test_the_exit_clause_signal_numbers_are_the_system_s():
    import signal

    from engine.language.clauses.exit import SIGNALS   # the defining module (a mutant rebinds it there)

    assert SIGNALS == {name: int(signal.Signals[name]) for name in SIGNALS} and len(SIGNALS) == 9


def test_only_expr_clauses_hold_expressions():
    assert list(clause({"log": {"pattern": "x"}}).expressions()) == []
    assert list(clause({"expr": "state.trainer.alive"}).expressions()) == [(("expr",), "state.trainer.alive")]
    assert explain({"expr": "state.trainer.alive"}).expected == "state.trainer.alive"


def test_log_scope_new_never_reads_the_tail_index():
    from engine.language.matcher import decide
    from engine.records.attempts import AttemptHistory
    from engine.language.matcher import MatchMemory

    new, tail = playbook("new", {"log": {"pattern": "boom", "scope": "new"}}), playbook("tail", {"log": {"pattern": "boom", "scope": "tail"}})
    state = snap(new_lines=["quiet"], tail=["boom"])
    outcome = decide(state, CONFIG, [new, tail], MatchMemory(), AttemptHistory())
    assert outcome.decision.matched == ("tail",)


def test_log_reads_a_long_line_on_its_first_max_line_characters():
    from engine.expr.patterns import MAX_LINE

    assert not check({"log": {"pattern": "needle"}}, new_lines=["x" * MAX_LINE + "needle"])
    assert check({"log": {"pattern": "needle"}}, new_lines=["x" * (MAX_LINE - 6) + "needle"])


def test_consecutive_is_for_loss_only_and_counts_from_two():
    from engine.language.playbook import build_playbook

    def rule(**metric):
        return build_playbook({"name": "r", "description": "d", "match": {"metric": metric}, "actions": [{"record": {"note": "n"}}]})
    with pytest.raises(ValueError, match="consecutive applies to loss only"):
        rule(name="grad_norm", op=">", value=1, consecutive=2)
    rule(name="grad_norm", op=">", value=1, consecutive=1)
    rule(name="loss", op=">", value=1, consecutive=2)
    with pytest.raises(ValueError, match="needs a value"):
        rule(name="loss", op=">")
    rule(name="loss", op="is_nan")


def test_consecutive_two_reads_the_history_not_the_current_value():
    spec = {"metric": {"name": "loss", "op": ">", "value": 5, "consecutive": 2}}
    assert check(spec, metrics={"loss": 1.0, "loss_history": [6.0, 7.0]})
    assert not check(spec, metrics={"loss": 9.0, "loss_history": [1.0, 7.0]})
    e = explain(spec, metrics={"loss_history": [6.0, 7.0]})
    assert (e.expected, e.actual) == ("loss > 5.0, for the last 2 logged values", "[6.0, 7.0]")


def test_min_step_one_skips_a_run_that_has_not_stepped():
    spec = {"metric": {"name": "loss", "op": ">", "value": 5, "min_step": 1}}
    assert not check(spec, metrics={"loss": 9.0, "step": 0}) and not check(spec, metrics={"loss": 9.0, "step": None})
    assert check(spec, metrics={"loss": 9.0, "step": 1})


def test_signals_spec_says_something_and_names_real_signals():
    from engine.language.clauses.signals import SignalsSpec

    for bad in ({"any_of": ["SIGFOO"]}, {"any_of": ["KILL"]}, {}):
        with pytest.raises(ValueError):
            SignalsSpec(**bad)
    assert SignalsSpec(any_of=["SIGBUS"]).any_of == ["SIGBUS"] and SignalsSpec(every_rank=True).every_rank


TORCHRUN_BUS = ["[0]:", "  exitcode  : -7 (pid: 11)", "[1]:", "  exitcode  : -7 (pid: 12)"]


def test_signals_any_of_reads_the_trainer_s_own_exit_and_every_report():
    spec = {"signals": {"any_of": ["SIGBUS"]}}
    assert check(spec, trainer={"alive": False, "exit_code": -7})
    assert check(spec, trainer={"alive": False, "exit_code": 1}, tail=TORCHRUN_BUS)
    assert not check(spec, trainer={"alive": False, "exit_code": 1}, tail=["exitcode  : -9 (pid: 3)"])
    assert not check(spec, trainer={"alive": True, "exit_code": -7})
    e = explain(spec, trainer={"alive": False, "exit_code": 1}, tail=TORCHRUN_BUS)
    assert e.matched and e.expected == "a process of the trainer died of ['SIGBUS']"
    assert e.actual == "reported ['SIGBUS', 'SIGBUS']; the trainer's own exit signal SIGBUS"   # a launcher's: its rank's
    assert explain(spec, trainer={"alive": False, "exit_code": -7}).actual == "reported none; the trainer's own exit signal SIGBUS"


def test_signals_every_rank_needs_the_same_signal_from_enough_processes():
    spec = {"signals": {"every_rank": True, "min_ranks": 2}}
    assert check(spec, trainer={"alive": False, "exit_code": 1}, tail=TORCHRUN_BUS)
    assert not check(spec, trainer={"alive": False, "exit_code": 1}, tail=TORCHRUN_BUS[:2])
    assert not check({"signals": {"every_rank": True, "any_of": ["SIGSEGV"]}}, trainer={"alive": False, "exit_code": 1}, tail=TORCHRUN_BUS)
    e = explain({"signals": {"every_rank": True, "any_of": ["SIGBUS"], "min_ranks": 3}}, trainer={"alive": False, "exit_code": 1})
    assert e.expected == "at least 3 processes reported dead, every one by the same signal of ['SIGBUS']"


def test_combinators_answer_true_or_false_and_their_unrolled_check_agrees_with_holds_of_observe():
    crash = {"alive": False, "exit_code": 1}
    both = {"all": [{"exit": {"nonzero": True}}, {"log": {"pattern": "x", "scope": "tail"}}]}
    either = {"any": [{"exit": {"signals": ["SIGKILL"]}}, {"log": {"pattern": "x", "scope": "tail"}}]}
    negated = {"not": {"exit": {"nonzero": True}}}
    for spec in (both, either, negated):
        for tail in (["x"], ["y"]):
            made, ctx = clause(spec), MatchContext(state=snap(trainer=crash, tail=tail), config=CONFIG)
            verdict = made.check(ctx)
            assert type(verdict) is bool and made.holds(made.observe(ctx)) is verdict, (spec, tail)
