"""The filters a playbook expression or template may use: an allowlist, each one bounded.

Jinja's filters are plain Python functions called directly by the compiled template, so none of
them goes through Sandbox.call; left as they are they bypass every budget (`'a'|replace('a', ...)`,
`x|tojson(indent=10**9)`, `[]|slice(10**8)`, `xs|sum(start=[])`). Here every allowed filter is
wrapped the same way:

- before it runs: one call spent, the input's length spent (1 unit per COPY_UNIT items: C-level passes;
  1 unit per item for the KEYED filters, which call Python per item where the deadline cannot stop them),
  a filter that turns its input into text refuses an input whose text would pass MAX_SEQUENCE
  (check_text, estimated without building it), and the arguments that set an output size
  (batch, slice, replace, tojson's indent, round's precision) are checked;
- a lazy result (select, map, slice, batch, unique, ...) is iterated through budget_stream, so each
  item it yields counts (with its weight) against the evaluation's iterations and wall-time deadline;
- a built result is weighed (check_weight): at most MAX_SEQUENCE items and characters, and what
  it weighs is spent too, so an evaluation builds at most about COPY_UNIT * MAX_ITERATIONS in all.

A filter not listed here does not exist in a playbook (center, indent, wordwrap, pprint, urlize,
random: output size set by an argument, or not a function of the data).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Callable

from jinja2.filters import make_attrgetter

from engine.expr.budget import (
    COPY_UNIT, MAX_INT_BITS, MAX_SEQUENCE, SandboxLimit, budget_iter, budget_stream, check_format, check_replace,
    check_text, check_weight, safe_add, safe_mod, spend,
)

MAX_INDENT = 16       # tojson(indent=...)
MAX_PRECISION = 400   # round(x, precision): |precision|; a float has about 17 digits anyway


def _positive_count(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_SEQUENCE:
        raise SandboxLimit(f"{name} must be a whole number from 1 to {MAX_SEQUENCE:,}")


def _batch(value: Any, linecount: Any = None, *args: Any, **kwargs: Any) -> None:
    _positive_count("batch's size", linecount)


def _slice(value: Any, slices: Any = None, *args: Any, **kwargs: Any) -> None:
    _positive_count("slice's count", slices)


def _replace(s: Any, old: Any = "", new: Any = "", *args: Any, **kwargs: Any) -> None:
    check_text(old)
    check_text(new)
    check_replace(str(s), str(old), str(new))


def _tojson(value: Any, indent: Any = None, **kwargs: Any) -> None:
    if indent is not None and (not isinstance(indent, int) or not 0 <= indent <= MAX_INDENT):
        raise SandboxLimit(f"tojson's indent must be from 0 to {MAX_INDENT}")
    check_text(value, indent=indent or 0)


def _round(value: Any, precision: Any = 0, *args: Any, **kwargs: Any) -> None:
    check_precision(precision)


def check_precision(precision: Any) -> None:
    if isinstance(precision, int) and abs(precision) > MAX_PRECISION:
        raise SandboxLimit(f"a rounding precision beyond {MAX_PRECISION} digits")


def _format(value: Any, *args: Any, **kwargs: Any) -> str:
    text = str(value)
    check_format(text)
    return safe_mod(text, kwargs or args)


def _sum(environment: Any, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
    """jinja's sum, each addition through the sandbox's `+` (sizes checked, copies counted)."""
    get = make_attrgetter(environment, attribute) if attribute is not None else (lambda item: item)
    total = start
    for item in budget_iter(iterable):
        total = safe_add(total, get(item))
    return total


# set below from jinja's own sum (pass_environment); mypy models no attributes set on a function
_sum.jinja_pass_arg = None  # type: ignore[attr-defined]

# Filters that call a Python key function per item inside one C call (sorted, min, max): the
# deadline cannot interrupt them, so the input's whole length is spent before they start.
KEYED = frozenset({"sort", "dictsort", "groupby", "min", "max"})

# name -> (turns its input into text, check of its arguments before it runs)
_TEXT, _DATA = True, False
ALLOWED_FILTERS: dict[str, tuple[bool, Callable[..., Any] | None]] = {
    "abs": (_DATA, None), "attr": (_DATA, None), "batch": (_DATA, _batch), "capitalize": (_TEXT, None),
    "count": (_DATA, None), "d": (_DATA, None), "default": (_DATA, None), "dictsort": (_DATA, None),
    "e": (_TEXT, None), "escape": (_TEXT, None), "filesizeformat": (_DATA, None), "first": (_DATA, None),
    "float": (_DATA, None), "forceescape": (_TEXT, None), "format": (_TEXT, None), "groupby": (_DATA, None),
    "int": (_DATA, None), "items": (_DATA, None), "join": (_DATA, None), "last": (_DATA, None),
    "length": (_DATA, None), "list": (_DATA, None), "lower": (_TEXT, None), "map": (_DATA, None),
    "max": (_DATA, None), "min": (_DATA, None), "reject": (_DATA, None), "rejectattr": (_DATA, None),
    "replace": (_TEXT, _replace), "reverse": (_DATA, None), "round": (_DATA, _round), "safe": (_TEXT, None),
    "select": (_DATA, None), "selectattr": (_DATA, None), "slice": (_DATA, _slice), "sort": (_DATA, None),
    "string": (_TEXT, None), "striptags": (_TEXT, None), "sum": (_DATA, None), "title": (_TEXT, None),
    "tojson": (_DATA, _tojson), "trim": (_TEXT, None), "truncate": (_TEXT, None), "unique": (_DATA, None),
    "upper": (_TEXT, None), "urlencode": (_TEXT, None), "wordcount": (_TEXT, None), "xmlattr": (_TEXT, None),
}


def bounded_filter(name: str, func: Callable[..., Any], text_input: bool, check: Callable[..., Any] | None) -> Callable[..., Any]:
    pass_arg = getattr(func, "jinja_pass_arg", None)
    skip = 0 if pass_arg is None else 1   # the environment, context or eval context jinja passes first
    keyed = name in KEYED

    def bounded(*args: Any, **kwargs: Any) -> Any:
        spend()
        value = args[skip] if len(args) > skip else None
        if isinstance(value, (str, list, tuple, dict, set, frozenset)):
            spend(len(value) if keyed else len(value) // COPY_UNIT)
        if text_input:
            check_text(value)
        if check is not None:
            check(*args[skip:], **kwargs)
        result = func(*args, **kwargs)
        if isinstance(result, Iterator) and not isinstance(result, str):
            return budget_stream(result)
        return check_weight(result)

    bounded.jinja_pass_arg = pass_arg  # type: ignore[attr-defined]  # function attributes: jinja reads them
    bounded.__name__ = getattr(func, "__name__", "filter")
    bounded.__wrapped__ = func  # type: ignore[attr-defined]  # as above (inspect reads it)
    return bounded


def bounded_filters(original: dict[str, Callable[..., Any]], join: Callable[..., Any]) -> dict[str, Callable[..., Any]]:
    """The allowlist, wrapped; `join` is the size-checked join (sandbox.guarded_join)."""
    replaced: dict[str, Callable[..., Any]] = {"join": join, "format": _format, "sum": _sum}
    _sum.jinja_pass_arg = original["sum"].jinja_pass_arg  # type: ignore[attr-defined]  # as above
    return {name: bounded_filter(name, replaced.get(name) or original[name], text_input, check)
            for name, (text_input, check) in ALLOWED_FILTERS.items()}


def bounded_round(value: Any, ndigits: Any = None) -> Any:
    """The `round` global: precision bounded (round(5, -10**9) would compute 10**(10**9))."""
    check_precision(ndigits)
    return round(value) if ndigits is None else round(value, ndigits)


def bounded_int(*args: Any) -> int:
    """The `int` global; the result is capped at MAX_INT_BITS like every other integer."""
    value = int(*args)
    if value.bit_length() > MAX_INT_BITS:
        raise SandboxLimit(f"an integer larger than {MAX_INT_BITS} bits")
    return value


def finalize(value: Any) -> Any:
    """Every `{{ ... }}` a template prints: its text checked before jinja converts it."""
    check_text(value)
    return value
