"""`stalled`: the trainer is alive but has printed no progress for a while."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from engine.language.clauses.base import Clause, MatchContext


class StalledSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    seconds: float | None = Field(None, gt=0, description="default: the run's derived hang timeout (state.hang_timeout_s)")


class StalledClause(Clause):
    kind = "stalled"
    doc = ("The trainer is alive but printed no progress line for `seconds`, by default for the run's "
           "own hang timeout `state.hang_timeout_s` (a multiple of the longest gap between progress lines "
           "seen, between `watch.hang_floor_s` and `watch.hang_timeout_s` of the run config).")
    example = "stalled:\n  seconds: 300"

    stalled: StalledSpec

    def observe(self, ctx: MatchContext) -> tuple[float, float] | None:
        """(seconds without progress, the limit) of a live trainer; None when it is not running."""
        if not ctx.state.trainer.alive:
            return None
        return ctx.state.seconds_since_progress, self._limit(ctx)

    def holds(self, observed) -> bool:
        return observed is not None and observed[0] >= observed[1]

    def expected(self, ctx: MatchContext) -> str:
        return f"alive trainer without progress for >= {self._limit(ctx):g} s"

    def show(self, observed) -> str:
        return repr(None if observed is None else observed[0])

    def _limit(self, ctx: MatchContext) -> float:
        return self.stalled.seconds or ctx.state.hang_timeout_s
