"""engine/core/text_safety.py, the edges its other tests leave open (benchmarks/bench_mutation.py's survivors):
which known values are redacted and in which forms (MIN_KNOWN, MIN_FOLDED, longest first), how deep
redact_tree walks a record before it keeps the rest as one cleaned text, and the secrets a record holds in
its keys, at any depth."""

from __future__ import annotations

import pytest

from engine.core.text_safety import REDACTED, for_run_log, forget_secrets, redact, redact_tree, remember_secrets

HF = "hf_" + "Q" * 30


@pytest.fixture(autouse=True)
def no_known_values():
    forget_secrets()
    yield
    forget_secrets()


def test_a_known_value_of_four_characters_is_redacted_and_one_of_three_is_ignored():
    remember_secrets(["k3y!", "abc", 1234, None])   # not strings: ignored, not an error
    assert redact("use k3y! and abc") == f"use {REDACTED} and abc"


def test_a_known_value_of_eight_characters_is_redacted_reversed_and_in_any_case():
    remember_secrets(["Tr4inKey"])
    assert redact("a Tr4inKey b yeKni4rT c TR4INKEY d tr4inkey") == f"a {REDACTED} b {REDACTED} c {REDACTED} d {REDACTED}"


def test_a_known_value_of_seven_characters_is_redacted_only_as_written():
    remember_secrets(["Tr4inKe"])
    assert redact("Tr4inKe eKni4rT TR4INKE") == f"{REDACTED} eKni4rT TR4INKE"


def test_a_known_value_inside_a_longer_one_never_leaves_the_longer_ones_end_shown():
    remember_secrets(["abcd", "abcdxyz"])                # both shorter than MIN_FOLDED
    assert redact("abcdxyz") == REDACTED
    remember_secrets(["abcdefgh", "abcdefghijkl"])       # both folded
    assert redact("abcdefghijkl lkjihgfedcba") == f"{REDACTED} {REDACTED}"


def test_remembering_again_adds_to_the_values_known():
    remember_secrets(["first-secret"])
    remember_secrets(["first-secret"])                   # nothing new: the pattern stays
    remember_secrets(["other-secret"])
    assert redact("first-secret other-secret") == f"{REDACTED} {REDACTED}"


def nested(depth: int, leaf, kind=list):
    for _ in range(depth):
        leaf = [leaf] if kind is list else {"k": leaf}
    return leaf


@pytest.mark.parametrize("kind", [list, dict])
def test_a_record_64_levels_deep_is_walked_whole(kind):
    got = redact_tree(nested(65, HF, kind))   # the innermost container is at depth 64
    assert got == nested(65, REDACTED, kind)


@pytest.mark.parametrize("kind", [list, dict])
def test_deeper_than_64_levels_the_rest_is_kept_as_one_cleaned_text(kind):
    got = redact_tree(nested(66, HF, kind))
    inner = got
    for _ in range(65):
        inner = inner[0] if kind is list else inner["k"]
    expected = repr([REDACTED]) if kind is list else repr({"k": REDACTED})
    assert inner == expected and HF not in repr(got)


def test_a_secret_in_a_key_is_redacted_at_every_depth_and_other_keys_kept():
    record = {f"HF_TOKEN={HF}": {"Bearer abcdefgh12345678": [{f"x {HF}": 1}], 7: "plain"}, "plain": (HF, 2.5)}
    got = redact_tree(record)
    assert got == {f"HF_TOKEN={REDACTED}": {f"Bearer {REDACTED}": [{f"x {REDACTED}": 1}], 7: "plain"},
                   "plain": [REDACTED, 2.5]}


def test_the_run_log_cleaning_reaches_keys_too():
    got = redact_tree({f"<!-- {HF} -->": "\x1b[2J"}, for_run_log)
    assert got == {f"<\\!-- {REDACTED} --\\>": "\\x1b[2J"}
