"""`stalled`: the trainer is alive but shows no progress (training) or no sign of life (start-up) for a while."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from engine.core.state import stall
from engine.language.clauses.base import Clause, MatchContext


class StalledSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    seconds: float | None = Field(None, gt=0, description="default: the run's derived hang timeout (state.hang_timeout_s)")


class StalledClause(Clause[tuple[str, float, float] | None]):
    kind = "stalled"
    doc = ("The trainer is alive and stuck. Training: no progress line for `seconds`, by default for the run's "
           "own hang timeout `state.hang_timeout_s` (a multiple of the longest gap between progress lines "
           "seen, between `watch.hang_floor_s` and `watch.hang_timeout_s` of the run config). Start-up (before "
           "a launch's first progress line, `state.trainer.phase == \"startup\"`: preprocessing, model build, "
           "checkpoint load, compile): no sign of life (new output, CPU time or I/O of the trainer's process "
           "tree, `state.trainer.seconds_since_activity`) for that same limit, or a start-up longer than "
           "`state.startup_timeout_s` (`watch.startup_timeout_s`), however busy. A checkpoint save (announced, "
           "no progress line since, `phase == \"saving\"`) is judged the same way (CPU time alone is no life in a save), with "
           "`state.save_timeout_s` (`watch.save_timeout_s`) as its longest, and so is the run's first validation "
           "(the trainer's `Validating ...`, no progress line since, `phase == \"validating\"`; CPU time is life there: it "
           "computes), which no learnt gap has measured yet; later validations are inside the learnt gap.")
    example = "stalled:\n  seconds: 300"

    stalled: StalledSpec

    def observe(self, ctx: MatchContext) -> tuple[str, float, float] | None:
        """(what, seconds, limit) of a live trainer; None when it is not running."""
        return stall(ctx.state, self.stalled.seconds)

    def holds(self, observed: tuple[str, float, float] | None) -> bool:
        return observed is not None and observed[1] >= observed[2]

    def expected(self, ctx: MatchContext) -> str:
        limit = self.stalled.seconds or ctx.state.hang_timeout_s
        if ctx.state.trainer.phase == "startup":
            return (f"alive trainer in start-up without a sign of life for >= {limit:g} s, "
                    f"or in start-up for >= {ctx.state.startup_timeout_s:g} s")
        if ctx.state.trainer.phase == "saving":
            return (f"alive trainer in a save without a sign of life for >= {limit:g} s, "
                    f"or saving for >= {ctx.state.save_timeout_s:g} s")
        if ctx.state.trainer.phase == "validating":
            return (f"alive trainer in its first validation without a sign of life for >= {limit:g} s, "
                    f"or validating for >= {ctx.state.save_timeout_s:g} s")
        return f"alive trainer without progress for >= {limit:g} s"

    def show(self, observed: tuple[str, float, float] | None) -> str:
        if observed is None or observed[0] == "no progress":
            return repr(None if observed is None else observed[1])
        return f"{observed[0]}: {observed[1]:g} s"
