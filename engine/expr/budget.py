"""The sandbox's budgets: what one evaluation or rendering may build and how long it may work.

A C-level operation cannot be interrupted, so every operation that could allocate without bound is
checked *before* it runs (`**`, `*`, `+`, `%`, `~`, str.replace/join, the `format` filter), and
Python-level work is bounded by counting loop iterations and calls against a wall-time deadline.
Every refusal is a SandboxLimit. engine/expr/sandbox.py applies them to jinja's operations,
engine/expr/filters.py to the filters, engine/expr/direct_eval.py to the fast path.
"""

from __future__ import annotations

import re
import threading
import time
from enum import Enum
from typing import TYPE_CHECKING, Any, Iterable, Iterator, TypeVar

if TYPE_CHECKING:
    from typing_extensions import Self

from pydantic import BaseModel

MAX_INT_BITS = 4096          # about 1,200 digits
MAX_SEQUENCE = 100_000       # characters of a string, items of a list
MAX_RANGE = 10_000
MAX_ITERATIONS = 100_000     # loop iterations and calls, per evaluation
MAX_OUTPUT = 100_000         # characters a template renders
MAX_SECONDS = 1.0            # wall time per evaluation
MAX_SOURCE = 20_000          # characters of an expression or template
MAX_DEPTH = 64               # nesting of the parsed expression tree
COPY_UNIT = 32               # items or characters built that count as one iteration (C-level copies)


class SandboxLimit(ValueError):
    """An expression or template asked for more than the sandbox allows."""


# --- per-evaluation budget ----------------------------------------------------------------------
class _Budget(threading.local):
    deadline: float | None = None
    work: int = 0


_BUDGET = _Budget()


class budget:
    """`with budget():` around one evaluation or rendering; nested uses share the outer one."""

    def __enter__(self) -> Self:
        self.outer = _BUDGET.deadline is not None
        if not self.outer:
            _BUDGET.deadline, _BUDGET.work = time.monotonic() + MAX_SECONDS, 0
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.outer:
            _BUDGET.deadline = None


def spend(units: int = 1) -> None:
    if _BUDGET.deadline is None:
        return
    _BUDGET.work += units
    if _BUDGET.work > MAX_ITERATIONS:
        raise SandboxLimit(f"more than {MAX_ITERATIONS:,} loop iterations and calls")
    if time.monotonic() > _BUDGET.deadline:
        raise SandboxLimit(f"took longer than {MAX_SECONDS:g} s")


# --- size checks, made before the operation -----------------------------------------------------
_SIZED = (str, list, tuple)
_WIDE_FORMAT = re.compile(r"%[^a-zA-Z%]*(\*|\d{4})|\{[^{}]*\d{4}[^{}]*\}")


def _check_int(value: Any) -> Any:
    if type(value) is int and value.bit_length() > MAX_INT_BITS:
        raise SandboxLimit(f"an integer larger than {MAX_INT_BITS} bits")
    return value


def _check_length(length: int) -> None:
    if length > MAX_SEQUENCE:
        raise SandboxLimit(f"a string or list longer than {MAX_SEQUENCE:,}")


_SCALARS = (int, float, bool, type(None), Enum)
_NESTED = (list, tuple, dict, set, frozenset)


def weight(value: Any, limit: int = MAX_SEQUENCE) -> int:
    """Items and characters reachable from value, a shared part counted each time it is reached.

    What a comparison, a sort or a conversion to text may have to walk: `[big] * 1000` holds one
    list but weighs a thousand of them. The walk stops as soon as the total passes `limit`, so it
    costs at most about `limit` steps whatever the value (a value from `state` or `config` included).
    """
    if isinstance(value, str):
        return len(value)
    if not isinstance(value, _NESTED):
        return 1
    total = 0
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += len(item)
            if total <= limit:
                stack.extend(v for v in (*item.keys(), *item.values()) if isinstance(v, (str, *_NESTED)))
        elif isinstance(item, _NESTED):
            total += len(item)
            if total <= limit:
                stack.extend(v for v in item if isinstance(v, (str, *_NESTED)))
        else:
            total += 1
        if total > limit:
            return total
    return total


def check_weight(value: Any) -> Any:
    """Refuse a value built in the sandbox that weighs more than MAX_SEQUENCE (see weight()).

    What it weighs is also spent (1 unit per COPY_UNIT), so all that one evaluation builds, not only
    each value, is bounded: at most about COPY_UNIT * MAX_ITERATIONS items and characters.
    """
    if isinstance(value, (str, *_NESTED)):
        size = weight(value)
        if size > MAX_SEQUENCE:
            raise SandboxLimit(f"a value holding more than {MAX_SEQUENCE:,} items and characters")
        spend(size // COPY_UNIT)
        return value
    return _check_int(value)


def text_size(value: Any, limit: int = MAX_SEQUENCE, indent: int = 0) -> int:
    """About how many characters str(value), repr or JSON of value has, computed without building it.

    Never less than a fifth of the real length (escapes: a character can become up to 12 in JSON),
    and the walk stops once the estimate passes `limit`: checking costs at most about `limit` steps.
    """
    if isinstance(value, str):
        return len(value)
    total, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        pad = 1 + indent * depth if indent else 0
        kind = type(item)
        if kind is str or isinstance(item, str):
            total += len(item) + 2 + pad
        elif kind is float:
            total += 24 + pad
        elif kind is bool or item is None:
            total += 5 + pad
        elif kind is int or isinstance(item, int):
            total += item.bit_length() // 3 + 1 + pad
        elif isinstance(item, (dict, list, tuple, set, frozenset, BaseModel)):
            members = (*item.keys(), *item.values()) if isinstance(item, dict) else \
                (*item.__dict__.keys(), *item.__dict__.values()) if isinstance(item, BaseModel) else item
            total += 2 + 2 * len(members) + pad + (len(type(item).__name__) if isinstance(item, BaseModel) else 0)
            inner_pad = 1 + indent * (depth + 1) if indent else 0
            for member in members:   # flat members inline (most lists are flat), containers pushed
                if total > limit:
                    return total
                kind = type(member)
                if kind is str:
                    total += len(member) + 2 + inner_pad
                elif kind is float:
                    total += 24 + inner_pad
                elif kind is int:
                    total += member.bit_length() // 3 + 1 + inner_pad
                else:
                    stack.append((member, depth + 1))
        else:
            total += 40 + pad   # an enum, a path, a date: short; the rendered text is checked after
        if total > limit:
            return total
    return total


def check_text(value: Any, limit: int = MAX_SEQUENCE, indent: int = 0) -> None:
    """Before converting value to text: refuse when the text would pass `limit` characters."""
    if not isinstance(value, str) and text_size(value, limit, indent) > limit:
        raise SandboxLimit(f"a value whose text would be longer than {limit:,} characters")


def safe_add(a: Any, b: Any) -> Any:
    if isinstance(a, _SIZED) and isinstance(b, _SIZED):
        _check_length(len(a) + len(b))
        spend(1 + (len(a) + len(b)) // COPY_UNIT)   # what the copy costs; bounds all an evaluation builds
        if not isinstance(a, str):
            if weight(a) + weight(b) > MAX_SEQUENCE:
                raise SandboxLimit(f"a value holding more than {MAX_SEQUENCE:,} items and characters")
    return _check_int(a + b)


def safe_mul(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        if a.bit_length() + b.bit_length() > MAX_INT_BITS:
            raise SandboxLimit(f"an integer larger than {MAX_INT_BITS} bits")
    elif isinstance(b, _SIZED) and isinstance(a, int) and not isinstance(a, _SIZED):
        return safe_mul(b, a)
    elif isinstance(a, _SIZED) and isinstance(b, int):
        _check_length(len(a) * max(b, 0))
        spend(1 + len(a) * max(b, 0) // COPY_UNIT)
        if not isinstance(a, str) and b > 1:
            if weight(a) * b > MAX_SEQUENCE:
                raise SandboxLimit(f"a value holding more than {MAX_SEQUENCE:,} items and characters")
    return a * b


def safe_pow(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1:
        if (abs(a).bit_length() - 1) * b > MAX_INT_BITS:
            raise SandboxLimit(f"an integer larger than {MAX_INT_BITS} bits")
    elif isinstance(b, int) and abs(b) > MAX_INT_BITS and isinstance(a, float):
        pass  # float power: overflow raises, never allocates
    return a ** b


def safe_mod(a: Any, b: Any) -> Any:
    if isinstance(a, str):
        check_format(a)
        check_text(b)   # `'%s' % big`: the argument's text is part of the output
        return check_weight(a % b)
    return a % b


def check_format(text: str) -> None:
    if _WIDE_FORMAT.search(text):
        raise SandboxLimit("a format width or precision of 1000 or more")


def safe_concat(*values: Any) -> str:
    for value in values:
        check_text(value)
    parts = [str(v) for v in values]
    _check_length(sum(map(len, parts)))
    return "".join(parts)


Item = TypeVar("Item")

BINOPS = {"+": safe_add, "*": safe_mul, "**": safe_pow, "%": safe_mod}


def budget_iter(iterable: Iterable[Item]) -> Iterator[Item]:
    """What every `{% for %}` loops over: counted against the budget."""
    for item in iterable:
        spend()
        yield item


def budget_stream(iterable: Iterable[Item]) -> Iterator[Item]:
    """A lazy filter's output (select, map, slice, ...): each item counted and weighed, as if built."""
    for item in iterable:
        spend(1 + (weight(item) // COPY_UNIT if isinstance(item, (str, *_NESTED)) else 0))
        yield item


def budget_range(*args: int) -> range:
    values = range(*args)
    if len(values) > MAX_RANGE:
        raise SandboxLimit(f"range() of more than {MAX_RANGE:,} items")
    return values


def guard_call(obj: Any, args: tuple) -> None:
    """Methods whose output size depends on their arguments: checked before they run."""
    owner, name = getattr(obj, "__self__", None), getattr(obj, "__name__", "")
    if isinstance(owner, str) and name == "replace" and len(args) >= 2:
        check_replace(owner, args[0], args[1])
    elif isinstance(owner, str) and name == "join" and args:
        check_join(args[0], owner)


def check_replace(text: str, old: Any, new: Any) -> None:
    """str.replace's output size, before it runs."""
    if isinstance(old, str) and isinstance(new, str):
        _check_length(len(text) + text.count(old) * len(new) if old else len(text) * (len(new) + 1) + len(new))


def check_join(items: Any, separator: Any) -> list:
    """The items of a join (a list), its output size checked first."""
    items = list(budget_iter(items)) if not isinstance(items, (list, tuple, str)) else items
    check_text(separator)
    spend(len(items) // COPY_UNIT)
    total = len(str(separator)) * len(items)
    if isinstance(items, str) or all(type(item) is str for item in items):
        total += sum(map(len, items))   # C-level: plain strings are most joins
    else:   # one walk over the list; its brackets, quotes and ", " are not in a join's output
        total += text_size(items, MAX_SEQUENCE + 4 * len(items) + 2) - 4 * len(items) - 2
    if total > MAX_SEQUENCE:
        raise SandboxLimit(f"a string or list longer than {MAX_SEQUENCE:,}")
    return list(items)


def guarded_join(join: Any) -> Any:
    """jinja's `join` filter, with the output size checked first."""
    def checked(eval_ctx: Any, value: Any, d: str = "", attribute: Any = None) -> str:
        items = check_join(value, d) if attribute is None else list(budget_iter(value))
        return check_weight(join(eval_ctx, items, d, attribute))
    checked.jinja_pass_arg = join.jinja_pass_arg  # type: ignore[attr-defined]  # pass_eval_context
    return checked
