"""`any`: at least one clause below matches."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from pydantic import Field

from engine.language.clauses.base import Clause, Combinator, MatchContext

if TYPE_CHECKING:
    from engine.language.clauses import AnyClause


class AnyOfClause(Combinator):
    kind = "any"
    doc = "At least one clause below matches."
    example = "any:\n  - metric: {name: loss, op: not_finite}\n  - log: {pattern: 'loss is nan'}"

    any: list[AnyClause] = Field(min_length=1)

    def children(self) -> list[Clause]:
        return self.any

    def holds(self, verdicts: Iterable[bool]) -> bool:
        return any(verdicts)

    def check(self, ctx: MatchContext) -> bool:
        for child in self.any:  # any(observe(ctx)), unrolled
            if child.check(ctx):
                return True
        return False

    def expected(self, ctx: MatchContext) -> str:
        return "at least one clause"
