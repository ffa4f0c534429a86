"""`expr`: a condition in the expression language (Jinja2, sandboxed) over `state` and `config`."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import Field, field_validator

from engine.language.clauses.base import Clause, MatchContext
from engine.expr.expressions import Expression, compile_expression, evaluate_condition


class ExprClause(Clause[tuple[bool, str | None]]):
    kind = "expr"
    doc = "A condition in the [expression language](#expressions); it must yield a real true/false."
    example = "expr: \"state.metrics.val_loss is not none and state.metrics.val_loss > 2 * state.metrics.best_val_loss\""

    expr: str = Field(description="Jinja2 expression over `state` and `config`; must yield true/false")

    @field_validator("expr")
    @classmethod
    def _compiles(cls, value: str) -> str:
        compile_expression(value)  # raises ExpressionError (a ValueError) with the reason
        return value

    @property
    def compiled(self) -> Expression:
        return _compiled(self.expr)

    def observe(self, ctx: MatchContext) -> tuple[bool, str | None]:
        """(value, error): an error or a non-bool value is false (fails closed), and is logged."""
        # One condition often guards several playbooks ("state.trainer.alive"): evaluate it once.
        outcome = ctx.expr_results.get(self.expr)
        if outcome is None:
            outcome = ctx.expr_results[self.expr] = evaluate_condition(self.compiled, ctx.expr_context)
        if outcome[1]:
            ctx.errors.append(outcome[1])
        return outcome

    def holds(self, observed: tuple[bool, str | None]) -> bool:
        return observed[0]

    def expected(self, ctx: MatchContext) -> str:
        return self.expr

    def show(self, observed: tuple[bool, str | None]) -> str:
        value, error = observed
        return error or repr(value)

    def expressions(self) -> Iterable[tuple[tuple, str]]:
        return ((("expr",), self.expr),)


_EXPR_CACHE: dict[str, Expression] = {}


def _compiled(source: str) -> Expression:
    if source not in _EXPR_CACHE:
        _EXPR_CACHE[source] = compile_expression(source)
    return _EXPR_CACHE[source]
