"""`checkpoint`: some saved checkpoint failed verification (or none did)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from engine.language.clauses.base import Clause, MatchContext


class CheckpointSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    corrupt: bool = Field(True, description="true: some checkpoint failed verification")


class CheckpointClause(Clause[list[int]]):
    kind = "checkpoint"
    doc = "Some saved checkpoint failed verification (or, with `corrupt: false`, none did)."
    example = "checkpoint:\n  corrupt: true"

    checkpoint: CheckpointSpec

    def observe(self, ctx: MatchContext) -> list[int]:
        """The steps whose checkpoints failed verification."""
        return list(ctx.state.checkpoints.corrupt_steps)

    def holds(self, observed: list[int]) -> bool:
        return bool(observed) == self.checkpoint.corrupt

    def expected(self, ctx: MatchContext) -> str:
        return "a corrupt checkpoint" if self.checkpoint.corrupt else "no corrupt checkpoint"
