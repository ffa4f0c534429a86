"""`not`: the clause below does not match."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from pydantic import ConfigDict, Field

from engine.language.clauses.base import Clause, Combinator, MatchContext

if TYPE_CHECKING:
    from engine.language.clauses import AnyClause


class NotClause(Combinator):
    kind = "not"
    doc = "The clause below does not match."
    example = "not:\n  exit: {signals: [SIGTERM]}"

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    not_: AnyClause = Field(alias="not")  # `not` is a Python keyword

    def children(self) -> list[Clause]:
        return [self.not_]

    def holds(self, verdicts: Iterable[bool]) -> bool:
        return not next(iter(verdicts))

    def check(self, ctx: MatchContext) -> bool:
        return not self.not_.check(ctx)  # holds(observe(ctx)) without the generator

    def expected(self, ctx: MatchContext) -> str:
        return "the clause below does not match"

    def parts(self) -> Iterable[tuple[tuple, Clause]]:
        return (((self.kind,), self.not_),)
