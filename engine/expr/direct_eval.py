"""A direct evaluator for the common shapes of playbook expressions, equal to jinja's compiled code.

Jinja runs an expression as a template function with a fresh template context per call, which
costs several microseconds before any work is done; conditions run at every observation. For the
node types below this module builds plain Python closures that make the very calls jinja's code
generator emits (`environment.getattr`, `environment.getitem`, the test functions, the Python
operators, or the sandbox's size-checked ones where it intercepts them), so values, undefined objects and
errors are the same. Any other node (filters, calls, slices, ...) makes `direct_evaluator` return
None and the expression runs through jinja. tests/language/test_playbook_language.py compares both paths.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, cast

from jinja2 import Environment, nodes
from jinja2.utils import _PassArg

from engine.expr.budget import BINOPS, check_weight

Evaluator = Callable[[dict], Any]
_MISSING = object()
_BINARY: dict[type[nodes.BinExpr], Callable[[Any, Any], Any]] = {
    nodes.Add: BINOPS["+"], nodes.Sub: operator.sub, nodes.Mul: BINOPS["*"], nodes.Div: operator.truediv,
    nodes.FloorDiv: operator.floordiv, nodes.Mod: BINOPS["%"], nodes.Pow: BINOPS["**"],
}  # the operators the sandbox intercepts go through its size checks, as jinja's call_binop does
_UNARY: dict[type[nodes.UnaryExpr], Callable[[Any], Any]] = {nodes.Neg: operator.neg, nodes.Pos: operator.pos}
_COMPARE = {
    "eq": operator.eq, "ne": operator.ne, "gt": operator.gt, "gteq": operator.ge, "lt": operator.lt,
    "lteq": operator.le, "in": lambda a, b: a in b, "notin": lambda a, b: a not in b,
}


class _Unsupported(Exception):
    pass


def direct_evaluator(expression: nodes.Expr, env: Environment, env_globals: dict) -> Evaluator | None:
    """A function of the expression's names (a dict), or None when jinja must evaluate it."""
    try:
        return _build(expression, env, env_globals)
    except _Unsupported:
        return None


def _build(node: nodes.Node, env: Environment, env_globals: dict) -> Evaluator:  # noqa: C901 - one branch per node type
    def sub(child: nodes.Node) -> Evaluator:
        return _build(child, env, env_globals)

    if isinstance(node, nodes.Const):
        value = node.value
        return lambda names: value
    if isinstance(node, nodes.Name) and node.ctx == "load":
        name = node.name

        def load(names: dict) -> Any:  # jinja: the context's names, then the globals, else undefined
            value = names.get(name, _MISSING)
            if value is _MISSING:
                value = env_globals.get(name, _MISSING)
            return env.undefined(name=name) if value is _MISSING else value
        return load
    if isinstance(node, nodes.Getattr):
        inner, attr, getattr_ = sub(node.node), node.attr, env.getattr
        return lambda names: getattr_(inner(names), attr)
    if isinstance(node, nodes.Getitem) and not isinstance(node.arg, nodes.Slice):
        inner, arg, getitem = sub(node.node), sub(node.arg), env.getitem
        return lambda names: getitem(inner(names), arg(names))
    if isinstance(node, nodes.And):
        left, right = sub(node.left), sub(node.right)
        return lambda names: left(names) and right(names)
    if isinstance(node, nodes.Or):
        left, right = sub(node.left), sub(node.right)
        return lambda names: left(names) or right(names)
    if isinstance(node, nodes.Not):
        inner = sub(node.node)
        return lambda names: not inner(names)
    if isinstance(node, nodes.UnaryExpr) and type(node) in _UNARY:
        inner, op = sub(node.node), _UNARY[type(node)]
        return lambda names: op(inner(names))
    if isinstance(node, nodes.BinExpr) and type(node) in _BINARY:
        left, right, binop = sub(node.left), sub(node.right), _BINARY[type(node)]
        return lambda names: binop(left(names), right(names))
    if isinstance(node, nodes.Compare):
        return _compare(sub(node.expr), [(_COMPARE[o.op], sub(o.expr)) for o in node.ops])
    if isinstance(node, nodes.CondExpr) and node.expr2 is not None:
        test, yes, no = sub(node.test), sub(node.expr1), sub(node.expr2)
        return lambda names: yes(names) if test(names) else no(names)
    if isinstance(node, (nodes.List, nodes.Tuple)):
        items, kind = [sub(i) for i in node.items], list if isinstance(node, nodes.List) else tuple
        return lambda names: check_weight(kind([item(names) for item in items]))  # as jinja's __weighed
    if isinstance(node, nodes.Test) and not (node.kwargs or node.dyn_args or node.dyn_kwargs):
        # jinja's table of tests is inferred as plain `function`, which mypy will not call: they are callables
        func = cast("Callable[..., Any] | None", env.tests.get(node.name))
        if func is None or _PassArg.from_obj(func) is not None:
            raise _Unsupported(node.name)
        inner, args = sub(node.node), [sub(a) for a in node.args]
        return lambda names: func(inner(names), *[a(names) for a in args])
    raise _Unsupported(type(node).__name__)


def _compare(first: Evaluator, ops: list[tuple[Callable, Evaluator]]) -> Evaluator:
    """Python's chained comparison: operands evaluated once and lazily, the last result returned."""
    if len(ops) == 1:
        (op, second), = ops
        return lambda names: op(first(names), second(names))

    def chain(names: dict) -> Any:
        left = first(names)
        result = True
        for op, operand in ops:
            right = operand(names)
            result = op(left, right)
            if not result:
                return result
            left = right
        return result
    return chain
