"""The matcher's limits and its prepared-set cache at their edges, written against the mutants
benchmarks/bench_mutation.py found alive (engine/language/matcher.py)."""

from __future__ import annotations

from engine.language import matcher
from engine.language.matcher import _prepared, attempt_number, limit_verdict
from engine.records.attempts import AttemptHistory
from tests.language.test_playbook_language import playbook

NOW = 100_000.0


def limited(**limits):
    return playbook("rule", limits=limits)


def verdict(rule, fired=(), escalated=frozenset(), max_per_hour=100, others=()):
    history = AttemptHistory(fired={"rule": tuple(fired), **({"other": tuple(others)} if others else {})}, escalated=escalated)
    return limit_verdict(rule, history, NOW, max_per_hour)


def test_an_escalated_playbook_is_exhausted_for_the_rest_of_the_run():
    kind, why = verdict(limited(), escalated=frozenset({"rule"}))
    assert kind == "exhausted" and "already escalated" in why


def test_a_firing_exactly_one_window_ago_has_left_the_window():
    rule = limited(max_attempts=1, window="100s")
    assert verdict(rule, fired=[NOW - 100])[0] == "ok"
    assert verdict(rule, fired=[NOW - 99.5])[0] == "exhausted"


def test_a_cooldown_waits_only_after_a_firing_and_ends_exactly_at_its_length():
    rule = limited(max_attempts=10, cooldown="60s")
    assert verdict(rule)[0] == "ok"                               # nothing fired yet: no cooldown to wait
    assert verdict(rule, fired=[NOW - 60])[0] == "ok"             # the cooldown is over at 60 s
    kind, why = verdict(rule, fired=[NOW - 59])
    assert kind == "cooldown" and why == "cooldown: 1.0 s left"


def test_the_backoff_exponent_stops_at_300():
    # 302 firings within the window: the exponent would be 301, it is held at 300 (1.0001**300 x 1000 s).
    rule = limited(max_attempts=1000, window="1000000s", cooldown="1000s", backoff=1.0001)
    fired = [NOW - 2000 - i for i in range(301, 0, -1)] + [NOW - 10]
    kind, why = verdict(rule, fired=fired)
    assert kind == "cooldown" and why == f"cooldown: {1000 * 1.0001 ** 300 - 10:.1f} s left", why


def test_the_breaker_counts_the_last_hour_exactly():
    rule = limited(max_attempts=10)
    assert verdict(rule, max_per_hour=1, others=[NOW - 3600])[0] == "ok"        # an hour ago: out of it
    assert verdict(rule, max_per_hour=1, others=[NOW - 3600.5])[0] == "ok"
    kind, why = verdict(rule, max_per_hour=1, others=[NOW - 3599])
    assert kind == "breaker" and "1 recoveries in the last hour" in why


def test_attempt_number_counts_the_firings_within_the_window():
    rule = limited(window="100s")
    assert attempt_number(AttemptHistory(), rule, NOW) == 1
    assert attempt_number(AttemptHistory(fired={"rule": (NOW - 100, NOW - 99, NOW - 1)}), rule, NOW) == 3
    assert attempt_number(AttemptHistory(fired={"rule": (NOW - 101,)}), rule, NOW) == 1


def test_the_prepared_sets_are_kept_until_16_and_then_started_afresh():
    matcher._PREPARED.clear()
    first = [playbook("a"), playbook("b")]
    kept = _prepared(first)
    other = [playbook("c")]
    _prepared(other)
    assert _prepared(first)[1] is kept[1] and len(matcher._PREPARED) == 2   # a second set does not drop the first
    sizes = []
    for rules in [[playbook(f"p{i}")] for i in range(20)]:
        _prepared(rules)
        sizes.append(len(matcher._PREPARED))
    assert max(sizes) == 16 and sizes[-1] < 16   # 16 sets at most, then a fresh start
    assert [p.name for p in _prepared(first)[0]] == ["a", "b"]
