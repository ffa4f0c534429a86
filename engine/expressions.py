"""The one expression language of playbooks: Jinja2 expressions in an immutable sandbox.

Compiled once at load time. A condition must evaluate to a real bool; any error fails closed
(the condition is false) and is reported to the caller, never raised into the watch loop.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, nodes
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import consume
from pydantic import BaseModel

from engine.direct_eval import direct_evaluator


class _Sandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, with a fast path for the fields of our pydantic models.

    Conditions run at every observation and mostly read fields of the state and the config
    (`state.metrics.loss`). Jinja checks every attribute access; for a model field the check always
    passes (a field name never starts with '_', a model is not a function, type or mutable
    container), so reading it directly gives the same value, several times faster.
    """

    def getattr(self, obj: Any, attribute: Any) -> Any:
        fields = _MODEL_FIELDS.get(type(obj))
        if fields is None and isinstance(obj, BaseModel):
            fields = _MODEL_FIELDS[type(obj)] = frozenset(type(obj).model_fields)
        if fields and attribute in fields:
            return obj.__dict__[attribute]
        return super().getattr(obj, attribute)


_MODEL_FIELDS: dict[type, frozenset[str]] = {}
_ENV = _Sandbox(undefined=StrictUndefined)
_ENV.globals.update(
    {
        "isnan": lambda x: x is not None and math.isnan(x),
        "isinf": lambda x: x is not None and math.isinf(x),
        "isfinite": lambda x: x is not None and math.isfinite(x),
        "median": lambda xs: statistics.median(xs) if xs else None,
        "min": min,
        "max": max,
        "abs": abs,
        "round": round,
        "int": int,
        "float": float,
        "len": len,
    }
)


_GLOBALS = dict(_ENV.globals)  # flattened once; see Expression.evaluate


class ExpressionError(ValueError):
    pass


def _check_names(tree: nodes.Node, source: str) -> None:
    """Refuse private/dunder attribute access up front, so lint reports sandbox escapes at load."""
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        attr = node.attr if isinstance(node, nodes.Getattr) else getattr(node.arg, "value", None)
        if isinstance(attr, str) and attr.startswith("_"):
            raise ExpressionError(f"'{source}': access to '{attr}' is not allowed in the sandbox")


@dataclass(frozen=True)
class Expression:
    source: str
    _compiled: Any
    _direct: Any = None   # the same computation without jinja's per-call set-up (engine/direct_eval.py)

    def evaluate(self, **context: Any) -> Any:
        if self._direct is not None:
            return self._direct(context)
        # What jinja2's TemplateExpression.__call__ does, except that it merges the template's
        # ChainMap of globals into every call's context, which costs more than most expressions.
        template = self._compiled._template
        jinja_context = template.new_context({**_GLOBALS, **context}, shared=True)
        consume(template.root_render_func(jinja_context))
        return jinja_context.vars["result"]


def compile_expression(source: str) -> Expression:
    if not isinstance(source, str) or not source.strip():
        raise ExpressionError("an expression must be a non-empty string")
    text = strip_braces(source)
    try:
        tree = _ENV.parse("{{ " + text + " }}")
        _check_names(tree, text)
        compiled = _ENV.compile_expression(text, undefined_to_none=False)
        direct = direct_evaluator(Parser(_ENV, text, state="variable").parse_expression(), _ENV, _GLOBALS)
    except TemplateSyntaxError as err:
        raise ExpressionError(f"'{text}': {err.message}") from None
    return Expression(text, compiled, direct)


def strip_braces(source: str) -> str:
    text = source.strip()
    if text.startswith("{{") and text.endswith("}}"):
        text = text[2:-2].strip()
    return text


def is_expression(value: Any) -> bool:
    """A parameter value written as "{{ ... }}" is computed; anything else is a literal."""
    return isinstance(value, str) and value.strip().startswith("{{") and value.strip().endswith("}}")


def is_template(value: Any) -> bool:
    """A string with "{{ }}" inside longer text is rendered to text (a message, a note, a reason)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value) and not is_expression(value)


_TEMPLATE_CACHE: dict[str, Any] = {}


def compile_template(source: str):
    if source not in _TEMPLATE_CACHE:
        try:
            tree = _ENV.parse(source)
            _check_names(tree, source)
            _TEMPLATE_CACHE[source] = _ENV.from_string(source)
        except TemplateSyntaxError as err:
            raise ExpressionError(f"'{source}': {err.message}") from None
    return _TEMPLATE_CACHE[source]


def render_template(source: str, context: dict) -> str:
    return compile_template(source).render(**context)


def evaluate_condition(expr: Expression, context: dict) -> tuple[bool, str | None]:
    """(value, error). Fails closed: an error or a non-bool gives False with the reason."""
    try:
        value = expr.evaluate(**context)
    except Exception as err:  # noqa: BLE001 - any failure of a user's expression fails closed
        return False, f"{expr.source}: {type(err).__name__}: {err}"
    if not isinstance(value, bool):
        return False, f"{expr.source}: must yield true/false, got {type(value).__name__} {value!r}"
    return value, None
