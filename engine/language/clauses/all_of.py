"""`all`: every clause below matches."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from pydantic import Field

from engine.language.clauses.base import Clause, Combinator, MatchContext

if TYPE_CHECKING:
    from engine.language.clauses import AnyClause


class AllClause(Combinator):
    kind = "all"
    doc = "Every clause below matches."
    example = "all:\n  - exit: {nonzero: true}\n  - log: {pattern: 'NCCL', scope: tail}"

    all: list[AnyClause] = Field(min_length=1)

    def children(self) -> list[Clause]:
        return self.all

    def holds(self, verdicts: Iterable[bool]) -> bool:
        return all(verdicts)

    def check(self, ctx: MatchContext) -> bool:
        for child in self.all:  # all(observe(ctx)), unrolled
            if not child.check(ctx):
                return False
        return True

    def expected(self, ctx: MatchContext) -> str:
        return "every clause"
