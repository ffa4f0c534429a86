"""`throughput`: tokens/s fell below a fraction of the run's own baseline."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from engine.language.clauses.base import Clause, MatchContext


class ThroughputSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    below_baseline_fraction: float = Field(gt=0, lt=10, description="tokens/s < fraction x the run's baseline")


class ThroughputClause(Clause[float | None]):
    kind = "throughput"
    doc = "Tokens/s fell below a fraction of the run's own baseline (measured after warm-up)."
    example = "throughput:\n  below_baseline_fraction: 0.5"

    throughput: ThroughputSpec

    def observe(self, ctx: MatchContext) -> float | None:
        """tokens/s as a fraction of the baseline; None while either is unknown."""
        m = ctx.state.metrics
        if m.tokens_per_sec is None or not m.baseline_tokens_per_sec:
            return None
        return m.tokens_per_sec / m.baseline_tokens_per_sec

    def holds(self, observed: float | None) -> bool:
        return observed is not None and observed < self.throughput.below_baseline_fraction

    def expected(self, ctx: MatchContext) -> str:
        return f"tokens/s < {self.throughput.below_baseline_fraction} x baseline"
