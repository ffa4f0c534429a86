"""The one expression language of playbooks: Jinja2 expressions in an immutable sandbox.

Compiled once at load time. A condition must evaluate to a real bool; any error fails closed
(the condition is false) and is reported to the caller, never raised into the watch loop.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateSyntaxError, nodes
from jinja2.parser import Parser
from jinja2.utils import consume

from engine.expr.direct_eval import direct_evaluator
from engine.expr.filters import bounded_filters, bounded_int, bounded_round, finalize
from engine.expr.budget import (
    MAX_OUTPUT, MAX_SOURCE, SandboxLimit, budget, budget_iter, budget_range, check_weight, guarded_join, safe_concat,
)
from engine.expr.sandbox import Sandbox, bound, check_tree


# optimized=False: nothing of a user's text is evaluated at compile time (lint must not run it).
# finalize: the text of every `{{ ... }}` a template prints is checked before it is built.
_ENV = Sandbox(undefined=StrictUndefined, optimized=False, finalize=finalize)
for _name in ("lipsum", "cycler", "joiner", "namespace"):  # unbounded output or state across loop iterations
    del _ENV.globals[_name]
# The allowlist of filters, each bounded (engine/expr/filters.py); any other filter name is unknown.
_ENV.filters = bounded_filters(dict(_ENV.filters), guarded_join(_ENV.filters["join"]))
_ENV.globals.update(
    {
        "isnan": lambda x: x is not None and math.isnan(x),
        "isinf": lambda x: x is not None and math.isinf(x),
        "isfinite": lambda x: x is not None and math.isfinite(x),
        "median": lambda xs: statistics.median(budget_iter(xs)) if xs else None,
        "min": min,
        "max": max,
        "abs": abs,
        "round": bounded_round,
        "int": bounded_int,
        "float": float,
        "len": len,
        "range": budget_range,
        "__budget_iter": budget_iter,
        "__concat": safe_concat,
        "__weighed": check_weight,
    }
)


_GLOBALS = dict(_ENV.globals)  # flattened once; see Expression.evaluate


class ExpressionError(ValueError):
    pass


def _check(tree: nodes.Node, source: str) -> None:
    """Refuse private names, macros/includes and deep nesting up front, so lint reports them at load."""
    reason = check_tree(tree)
    if reason:
        raise ExpressionError(f"'{_short(source)}': {reason}")


def _short(source: str) -> str:
    return source if len(source) <= 200 else source[:200] + "..."


@dataclass(frozen=True)
class Expression:
    source: str
    _template: Any
    _direct: Any = None   # the same computation without jinja's per-call set-up (engine/expr/direct_eval.py)
    _builds: bool = False  # it has operators or literals that build values: the direct path runs under a budget too

    def evaluate(self, **context: Any) -> Any:
        try:
            if self._direct is not None:
                if self._builds:  # what it builds is spent against the deadline, as in jinja's path
                    with budget():
                        return self._direct(context)
                return self._direct(context)  # no loops, calls or building: comparisons and reads only
            # What jinja2's TemplateExpression.__call__ does, except that it merges the template's
            # ChainMap of globals into every call's context, which costs more than most expressions.
            with budget():
                jinja_context = self._template.new_context({**_GLOBALS, **context}, shared=True)
                consume(self._template.root_render_func(jinja_context))
                return jinja_context.vars["result"]
        except (SandboxLimit, MemoryError, RecursionError) as err:
            raise ExpressionError(f"'{_short(self.source)}': {_limit_reason(err)}") from None


LIMIT_MARK = "exceeds the sandbox's limits"


def _limit_reason(err: BaseException) -> str:
    if isinstance(err, SandboxLimit):
        return f"{LIMIT_MARK}: {err}"
    return f"{LIMIT_MARK}: " + ("too deeply nested" if isinstance(err, RecursionError) else "out of memory")


def _parse(make: Any, source: str) -> Any:
    """Parse with the sandbox's size rules; every failure is an ExpressionError naming the source."""
    if len(source) > MAX_SOURCE:
        raise ExpressionError(f"'{_short(source)}': longer than {MAX_SOURCE:,} characters")
    try:
        tree = make()
        _check(tree, source)
        return tree
    except TemplateSyntaxError as err:
        raise ExpressionError(f"'{_short(source)}': {err.message}") from None
    except (RecursionError, MemoryError, SandboxLimit) as err:
        raise ExpressionError(f"'{_short(source)}': {_limit_reason(err)}") from None


def _build_template(tree: nodes.Template, source: str) -> Template:
    try:
        return _ENV.from_string(bound(tree))
    except TemplateSyntaxError as err:
        raise ExpressionError(f"'{_short(source)}': {err.message}") from None
    except (RecursionError, MemoryError, SandboxLimit, SyntaxError) as err:
        raise ExpressionError(f"'{_short(source)}': {_limit_reason(err) if not isinstance(err, SyntaxError) else 'too complex'}") from None


def compile_expression(source: str) -> Expression:
    if not isinstance(source, str) or not source.strip():
        raise ExpressionError("an expression must be a non-empty string")
    text = strip_braces(source)
    expr = _parse(lambda: _parse_expression(text), text)
    template = _build_template(nodes.Template([nodes.Assign(nodes.Name("result", "store"), expr, lineno=1)], lineno=1), text)
    parsed = _parse_expression(text)
    direct = direct_evaluator(parsed, _ENV, _GLOBALS)
    builds = any(isinstance(n, _BUILDING) for n in (parsed, *parsed.find_all(nodes.Node)))
    return Expression(text, template, direct, builds)


_BUILDING = (nodes.Add, nodes.Mul, nodes.Mod, nodes.Pow, nodes.List, nodes.Tuple, nodes.Dict)


def _parse_expression(text: str) -> nodes.Expr:
    parser = Parser(_ENV, text, state="variable")
    expr = parser.parse_expression()
    if not parser.stream.eos:  # what jinja's compile_expression checks
        raise TemplateSyntaxError("chunk after expression", parser.stream.current.lineno, None, None)
    return expr


def syntax_tree(source: str, template: bool = False) -> nodes.Node:
    """The parsed tree of an expression (braces optional) or a template, for static checks of its names
    (engine/language/typed_names.py); a TemplateSyntaxError when it does not parse."""
    return _ENV.parse(source) if template else _parse_expression(strip_braces(source))


def strip_braces(source: str) -> str:
    text = source.strip()
    if is_expression(text):
        text = text[2:-2].strip()
    return text


def is_expression(value: Any) -> bool:
    """A parameter value written as "{{ ... }}" is computed; anything else is a literal.

    "{{ a }} of {{ b }}" starts and ends with braces but is text with two expressions in it.
    """
    if not isinstance(value, str):
        return False
    text = value.strip()
    inner = text[2:-2]
    return text.startswith("{{") and text.endswith("}}") and "{{" not in inner and "}}" not in inner and "{%" not in inner


def is_template(value: Any) -> bool:
    """A string with "{{ }}" inside longer text is rendered to text (a message, a note, a reason)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value) and not is_expression(value)


_TEMPLATE_CACHE: dict[str, Template] = {}


def compile_template(source: str) -> Template:
    if source not in _TEMPLATE_CACHE:
        tree = _parse(lambda: _ENV.parse(source), source)
        _TEMPLATE_CACHE[source] = _build_template(tree, source)
    return _TEMPLATE_CACHE[source]


def render_template(source: str, context: dict) -> str:
    """The rendered text, at most MAX_OUTPUT characters, within the sandbox's budget."""
    template = compile_template(source)
    parts, size = [], 0
    try:
        with budget():
            for part in template.generate(**context):
                size += len(part)
                if size > MAX_OUTPUT:
                    raise SandboxLimit(f"renders more than {MAX_OUTPUT:,} characters")
                parts.append(part)
    except (SandboxLimit, MemoryError, RecursionError) as err:
        raise ExpressionError(f"'{_short(source)}': {_limit_reason(err)}") from None
    return "".join(parts)


def evaluate_condition(expr: Expression, context: dict) -> tuple[bool, str | None]:
    """(value, error). Fails closed: an error or a non-bool gives False with the reason."""
    try:
        value = expr.evaluate(**context)
    except ExpressionError as err:
        return False, str(err)
    except Exception as err:  # noqa: BLE001 - any failure of a user's expression fails closed
        return False, f"{expr.source}: {type(err).__name__}: {err}"
    if not isinstance(value, bool):
        return False, f"{expr.source}: must yield true/false, got {type(value).__name__} {value!r}"
    return value, None
