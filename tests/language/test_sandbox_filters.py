"""Issue 26 item 3: budgets that hold for every filter and method, not only the operators.

Each reproduction from the issue is refused (an ExpressionError naming the source) within the time
limit and a fixed amount of memory; a hypothesis property over generated filter chains asserts the
same bounds for any chain of allowed filters; lint gives up on the playbook from the issue quickly.
"""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from engine.core.config import RunConfig
from engine.core.state import StateSnapshot
from engine.expr.expressions import ExpressionError, _ENV, compile_expression, render_template
from engine.expr.filters import ALLOWED_FILTERS
from engine.expr.budget import MAX_SECONDS
from runbook.cli import app
from runbook.exit_codes import ExitCode

SECONDS = MAX_SECONDS + 1.0     # the deadline, one uninterruptible step, a busy machine
PEAK_BYTES = 64 * 2**20         # measured worst: about 25 MB (docs/reliability.md)
CONTEXT = {"state": StateSnapshot(), "config": RunConfig(), "attempt": 1}

# The issue's reproductions and their relatives: every one refused.
REFUSED = [
    "('a'*99999)|replace('a','a'*10000)",
    "dict(a=1)|tojson(indent=10**9)",
    "(['a'*10000]*10000)|string",
    "[]|slice(10000000)|select|first",
    "([[1]*1000]*2000)|sum(start=[])",
    "[1]|batch(300000000,'x')",
    "([] | slice(100000000) | select | list | length) > 0",
    "round(5, -10**9)",
    "5|round(-10**9, 'ceil')",
    "(['a'*10000]*10000) ~ 'x'",
    "'%s' % (['a'*10000]*10000,)",
    "','.join([['a'*10000]*10000])",
    "(['a'*10000]*10000)|join(',')",
    "(['a'*10000]*10000)|upper",
    "(['a'*10000]*10000)|e",
    "(['a'*10000]*10000)|urlencode",
    "(['a'*10000]*10000)|wordcount",
    "([1]*50000)|map('replace','1','x'*1000)|list",
    "([[1]*99999]*99999)|sort|list",
    "[[1]*99999, [1]*99999]",
    "dict(a=[1]*99999, b=[1]*99999)",
    "(range(10000)|list)|map('string')|map('replace','1','x'*50)|list",
    "int('1'*9999, 2)",
    "'x'|center(10**9)",
    "'x'|pprint",
    "'x'|indent(10**9)",
    "dict(a=1)|xmlattr|replace('a', 'b'*99999)",
    "([1]*99999)|sort|list|unique|list|sort|list",
    ]

# Within the budgets, so allowed: the point is that they stay inside the same bounds as the refused ones.
BOUNDED_EITHER_WAY = [
    "(range(10000)|list)|batch(1)|map('sum')|sum > 0",
]

ALLOWED = {
    "[1,2,3]|sum": 6,
    "[[1],[2]]|sum(start=[])": [1, 2],
    "'abc'|replace('b','x')": "axc",
    "[3,1,2]|sort|list": [1, 2, 3],
    "(dict(a=1)|tojson(indent=2))|length": 12,
    "[1,2,3,4]|batch(3)|list|length": 2,
    "[1,2,3,4]|slice(2)|list": [[1, 2], [3, 4]],
    "round(2.567, 2)": 2.57,
    "range(5)|map('string')|join(',')": "0,1,2,3,4",
    "(['a'*1000]*99)|string|length": 100 * 2 + 1000 * 99 - 2 + 2 * 99 - 2 + 2,
}

TEMPLATES_REFUSED = [
    "{% set a = [1]*50000 %}{% set b = [a, a] %}{% set c = [b, b] %}{{ c == c }}",
    "{{ [2**4000]*100000 }}",
    "{% for i in range(10000) %}{% set x = [1]*99999 %}{% endfor %}",
    "".join(f"{{% set a{i} = [1]*99999 %}}" for i in range(70)),
    "{{ (['a'*10000]*10000)|tojson }}",
]


def measured(run):
    """(outcome, seconds, peak bytes) of run(); outcome is the value or the ExpressionError.

    Run twice: timed on its own (tracemalloc makes every small allocation, even an int, many times
    slower), then under tracemalloc for the peak of what it allocates.
    """
    def once():
        try:
            return run()
        except ExpressionError as err:
            return err

    start = time.monotonic()
    outcome = once()
    seconds = time.monotonic() - start
    tracemalloc.start()
    try:
        once()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return outcome, seconds, peak


@pytest.mark.parametrize("source", REFUSED)
def test_each_reproduction_is_refused_within_the_bounds(source):
    outcome, seconds, peak = measured(lambda: compile_expression(source).evaluate(**CONTEXT))
    assert isinstance(outcome, ExpressionError), (source, outcome)
    assert "\n" not in str(outcome) and source[:15] in str(outcome)
    assert seconds < SECONDS and peak < PEAK_BYTES, (source, seconds, peak)


@pytest.mark.parametrize("source", BOUNDED_EITHER_WAY)
def test_work_just_inside_the_budgets_stays_within_the_bounds(source):
    outcome, seconds, peak = measured(lambda: compile_expression(source).evaluate(**CONTEXT))
    assert seconds < SECONDS and peak < PEAK_BYTES, (source, outcome, seconds, peak)


@pytest.mark.parametrize("source,expected", ALLOWED.items())
def test_ordinary_filters_still_work(source, expected):
    assert compile_expression(source).evaluate(**CONTEXT) == expected


@pytest.mark.parametrize("template", TEMPLATES_REFUSED)
def test_templates_that_build_or_print_too_much_are_refused(template):
    outcome, seconds, peak = measured(lambda: render_template(template, CONTEXT))
    assert isinstance(outcome, ExpressionError), (template, outcome)
    assert seconds < SECONDS and peak < PEAK_BYTES, (template, seconds, peak)


def test_the_filters_are_exactly_the_allowlist_and_all_wrapped():
    assert set(_ENV.filters) == set(ALLOWED_FILTERS)
    assert all(hasattr(f, "__wrapped__") for f in _ENV.filters.values())
    for refused in ("center", "indent", "wordwrap", "pprint", "urlize", "random"):
        with pytest.raises(ExpressionError):
            compile_expression(f"'x'|{refused}").evaluate(**CONTEXT)


# --- the property: any chain of allowed filters stays within the bounds ---------------------------
BASES = ["'a'*99999", "'\U0001F600'*99999", "[1]*99999", "['a'*1000]*99", "[[1]*999]*99", "range(10000)|list",
         "dict(a=1, b='x')", "[]", "''", "state.metrics.loss_history", "config.out_dir", "[0.5]*99999"]
ARGS = st.sampled_from(["", "0", "1", "7", "99999", "100000", "10**9", "-10**9", "'a'", "'a'*10000", "''",
                        "[]", "start=[]", "indent=16", "indent=10**9", "'x', 'y'*9999", "'string'", "'sum'",
                        "'replace', 'a', 'b'*999", "'length'", "'odd'", "2, 'x'"])
FILTERS = sorted(ALLOWED_FILTERS) + ["center", "pprint"]


@st.composite
def chains(draw):
    source = "(" + draw(st.sampled_from(BASES)) + ")"
    for _ in range(draw(st.integers(1, 4))):
        name, args = draw(st.sampled_from(FILTERS)), draw(st.lists(ARGS, max_size=2))
        source += f"|{name}" + (f"({', '.join(args)})" if args else "")
    return source + ("|list" if draw(st.booleans()) else "")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=chains())
def test_any_filter_chain_stays_within_time_and_memory(source):
    def run():
        try:
            value = compile_expression(source).evaluate(**CONTEXT)
        except ExpressionError:
            raise
        except Exception as err:  # noqa: BLE001 - a filter's own TypeError etc.: fails closed, like conditions
            return err
        return value

    outcome, seconds, peak = measured(run)
    assert not isinstance(outcome, (MemoryError, RecursionError)), source
    assert seconds < SECONDS, (source, seconds)
    assert peak < PEAK_BYTES, (source, peak)


def test_lint_gives_up_on_the_issues_playbook_quickly(tmp_path):
    text = ("name: slow\ndescription: x\nmatch:\n  all:\n    - stalled: {}\n"
            f"    - expr: {json.dumps('([] | slice(100000000) | select | list | length) > 0')}\n"
            "actions:\n  - record: {note: x}\n")
    (tmp_path / "p.yaml").write_text(text)
    start = time.monotonic()
    result = CliRunner().invoke(app, ["playbooks", "lint", str(tmp_path)])
    assert time.monotonic() - start < 10
    assert result.exit_code in (ExitCode.INVALID, ExitCode.OK), result.output
    assert "Traceback" not in result.output
