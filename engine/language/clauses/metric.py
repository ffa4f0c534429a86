"""`metric`: a metric compared with a threshold, tested for NaN/Inf, or compared with its baseline."""

from __future__ import annotations

import math
import operator
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.core.state import Metrics
from engine.language.clauses.base import Clause, MatchContext

MetricName = Literal["loss", "val_loss", "tokens_per_sec", "grad_norm", "lr", "step", "tokens"]
MetricOp = Literal[">", "<", ">=", "<=", "==", "!=", "is_nan", "is_inf", "not_finite", "ratio_to_median_above", "ratio_to_median_below", "ratio_to_best_above"]
UNARY = ("is_nan", "is_inf", "not_finite")
RATIO_OPS = frozenset(("ratio_to_median_above", "ratio_to_median_below", "ratio_to_best_above"))

# op -> test of a known value against the spec's `value` (the ratio ops compare the ratio).
_TESTS = {
    ">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
    "is_nan": lambda actual, _: math.isnan(actual),
    "is_inf": lambda actual, _: math.isinf(actual),
    "not_finite": lambda actual, _: not math.isfinite(actual),
    "ratio_to_median_above": operator.gt, "ratio_to_best_above": operator.gt, "ratio_to_median_below": operator.lt,
}


class MetricSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: MetricName
    op: MetricOp
    value: float | None = Field(None, description="threshold (or ratio for ratio_to_median_*)")
    min_step: int = Field(0, ge=0, description="ignore observations before this optimizer step (warm-up)")
    consecutive: int = Field(1, ge=1, le=20, description="loss only: the last N logged values must all satisfy it")

    @model_validator(mode="after")
    def _needs_value(self) -> MetricSpec:
        if self.op not in UNARY and self.value is None:
            raise ValueError(f"op '{self.op}' needs a value")
        if self.consecutive > 1 and self.name != "loss":
            raise ValueError("consecutive applies to loss only (the one metric with a logged history)")
        return self


class MetricClause(Clause[list[float | None] | None]):
    kind = "metric"
    doc = ("Compare a metric with a threshold, test it for NaN/Inf, or compare it with its rolling median "
           "(`ratio_to_median_*`, loss only). An unknown metric (not printed yet) never matches. `grad_norm` and `lr` "
           "come from trainers that print them (hf-trainer, a script passing them to `sdk.progress`); a playbook "
           "naming a metric the run's trainer kind never prints is refused at load.")
    example = "metric:\n  name: loss\n  op: ratio_to_median_above\n  value: 3\n  min_step: 50"

    metric: MetricSpec

    def observe(self, ctx: MatchContext) -> list[float | None] | None:
        """The value (for a ratio op, its ratio to the baseline; None while either is unknown); with
        `consecutive`, the last N logged. None before `min_step` and while fewer than N are logged."""
        metrics = ctx.state.metrics
        spec = self.metric
        if spec.min_step and (metrics.step or 0) < spec.min_step:
            return None
        values: list[float | None]
        if spec.consecutive > 1:
            values = list(metrics.loss_history[-spec.consecutive:])
            if len(values) < spec.consecutive:
                return None
        else:
            values = [getattr(metrics, spec.name)]
        if spec.op in RATIO_OPS:
            baseline = self._baseline(metrics)
            values = [v / baseline if v is not None and baseline else None for v in values]
        return values

    def holds(self, observed: list[float | None] | None) -> bool:
        if observed is None:
            return False
        test, threshold = _TESTS[self.metric.op], self.metric.value
        for value in reversed(observed):  # newest first: in a healthy run the first one decides
            if value is None or not test(value, threshold):  # an unknown value never matches
                return False
        return True

    def expected(self, ctx: MatchContext) -> str:
        m = self.metric
        warm = f" (from step {m.min_step})" if m.min_step else ""
        if m.consecutive > 1:
            warm += f", for the last {m.consecutive} logged values"
        if m.op in UNARY:
            return f"{m.name} {m.op}{warm}"
        if m.op == "ratio_to_best_above":
            return f"{m.name} / lowest rolling median so far > {m.value}{warm}"
        if m.op.startswith("ratio_to_median"):
            side = ">" if m.op.endswith("above") else "<"
            return f"{m.name} / rolling median {side} {m.value}{warm}"
        return f"{m.name} {m.op} {m.value}{warm}"

    def show(self, observed: list[float | None] | None) -> str:
        return repr(observed if observed is None or self.metric.consecutive > 1 else observed[0])

    def _baseline(self, metrics: Metrics) -> float | None:
        if self.metric.name != "loss":
            return None
        return metrics.loss_best_median if self.metric.op == "ratio_to_best_above" else metrics.loss_median
