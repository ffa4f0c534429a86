"""Match clauses of the playbook language: what each checks, and how it explains itself.

Every clause has one `check(ctx) -> bool` used by the matcher and one `explain(ctx)` used by
`runbook playbooks explain`; both go through the same `_observe`/`_holds` pair, so an explanation
can never disagree with a decision.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Iterator, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from engine.expressions import Expression, compile_expression, evaluate_condition
from engine.patterns import MAX_LINE, compile_pattern

SIGNALS = {"SIGHUP": 1, "SIGINT": 2, "SIGKILL": 9, "SIGSEGV": 11, "SIGTERM": 15, "SIGABRT": 6, "SIGBUS": 7}


@dataclass
class Explanation:
    clause: str
    matched: bool
    expected: str
    actual: str
    children: list["Explanation"] = field(default_factory=list)


@dataclass(slots=True)
class MatchContext:
    """What clauses see: the snapshot, the run config, and the expression context built once."""

    state: Any
    config: Any
    errors: list[str] = field(default_factory=list)
    tail_index: Any = None   # engine.tail_index.TailIndex of the matcher's playbook set
    expr_results: dict = field(default_factory=dict)   # condition -> (value, error), this observation
    _expr_context: dict | None = None
    _tail_first: dict | None = None

    def first_tail_lines(self) -> dict:
        if self._tail_first is None:
            self._tail_first = self.tail_index.first_lines(self.state.tail)
        return self._tail_first

    @property
    def expr_context(self) -> dict:
        if self._expr_context is None:
            self._expr_context = {"state": self.state, "config": self.config}
        return self._expr_context


class Clause(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def check(self, ctx: MatchContext) -> bool:
        return self._holds(self._observe(ctx))

    def explain(self, ctx: MatchContext) -> Explanation:
        actual = self._observe(ctx)
        return Explanation(self.kind(), self._holds(actual), self.expected(), _show(actual))

    def kind(self) -> str:
        return next(iter(type(self).model_fields))

    def _observe(self, ctx: MatchContext) -> Any:
        raise NotImplementedError

    def _holds(self, actual: Any) -> bool:
        raise NotImplementedError

    def expected(self) -> str:
        raise NotImplementedError


def _show(value: Any) -> str:
    if isinstance(value, list):
        return f"{len(value)} line(s)" if value and isinstance(value[0], str) else repr(value)
    return repr(value)


# --- log lines -----------------------------------------------------------------------------------
class LogSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    pattern: str = Field(description="regular expression searched in each line (RE2 syntax: Python's without backreferences and lookaround; matched in linear time)")
    scope: Literal["new", "tail"] = Field("new", description="new: lines since the last observation; tail: recent lines")
    ignore_case: bool = False

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        compile_pattern(value, False)  # raises ValueError with the reason
        return value


class LogClause(Clause):
    log: LogSpec

    @property
    def regex(self) -> re.Pattern:
        return _regex(self.log.pattern, self.log.ignore_case)

    def _observe(self, ctx):
        regex = self.regex
        if self.log.scope == "tail" and ctx.tail_index is not None and regex in ctx.tail_index.position:
            return ctx.first_tail_lines().get(regex)
        lines = ctx.state.new_lines if self.log.scope == "new" else ctx.state.tail
        return next((line for line in lines if regex.search(line if len(line) <= MAX_LINE else line[:MAX_LINE])), None)

    def _holds(self, actual):
        return actual is not None

    def expected(self):
        return f"a {self.log.scope} line matching /{self.log.pattern}/"


_REGEX_CACHE: dict[tuple[str, bool], re.Pattern] = {}


def _regex(pattern: str, ignore_case: bool) -> re.Pattern:
    key = (pattern, ignore_case)
    if key not in _REGEX_CACHE:
        _REGEX_CACHE[key] = compile_pattern(pattern, ignore_case)
    return _REGEX_CACHE[key]


# --- metrics -------------------------------------------------------------------------------------
MetricName = Literal["loss", "val_loss", "tokens_per_sec", "grad_norm", "lr", "step", "tokens"]
MetricOp = Literal[">", "<", ">=", "<=", "==", "!=", "is_nan", "is_inf", "not_finite", "ratio_to_median_above", "ratio_to_median_below", "ratio_to_best_above"]


class MetricSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: MetricName
    op: MetricOp
    value: float | None = Field(None, description="threshold (or ratio for ratio_to_median_*)")
    min_step: int = Field(0, ge=0, description="ignore observations before this optimizer step (warm-up)")
    consecutive: int = Field(1, ge=1, le=20, description="loss only: the last N logged values must all satisfy it")

    @model_validator(mode="after")
    def _needs_value(self):
        if self.op not in ("is_nan", "is_inf", "not_finite") and self.value is None:
            raise ValueError(f"op '{self.op}' needs a value")
        if self.consecutive > 1 and self.name != "loss":
            raise ValueError("consecutive applies to loss only (the one metric with a logged history)")
        return self


_COMPARE = {
    ">": lambda a, b: a > b, "<": lambda a, b: a < b, ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
}


class MetricClause(Clause):
    metric: MetricSpec

    def _observe(self, ctx):
        metrics = ctx.state.metrics
        if self.metric.min_step and (metrics.step or 0) < self.metric.min_step:
            return None
        n = self.metric.consecutive
        if n > 1:
            history = metrics.loss_history[-n:]
            if len(history) < n:
                return None
            values = [self._relative(v, metrics) for v in history]
            return None if any(v is None for v in values) else values
        return self._relative(getattr(metrics, self.metric.name), metrics)

    def check(self, ctx):
        # Same primitives as _observe/_holds, newest value first: a healthy run fails at the first one.
        metrics = ctx.state.metrics
        m = self.metric
        if m.min_step and (metrics.step or 0) < m.min_step:
            return False
        if m.consecutive > 1:
            history = metrics.loss_history
            if len(history) < m.consecutive:
                return False
            return all(self._holds_one(self._relative(v, metrics)) for v in reversed(history[-m.consecutive:]))
        return self._holds_one(self._relative(getattr(metrics, m.name), metrics))

    def _relative(self, value, metrics):
        """The value itself, or its ratio to the baseline the op names."""
        if value is None or not self.metric.op.startswith("ratio_to"):
            return value
        base = None
        if self.metric.name == "loss":
            base = metrics.loss_best_median if self.metric.op == "ratio_to_best_above" else metrics.loss_median
        return value / base if base else None

    def _holds(self, actual):
        if isinstance(actual, list):
            return all(self._holds_one(v) for v in actual)
        return self._holds_one(actual)

    def _holds_one(self, actual):
        op, threshold = self.metric.op, self.metric.value
        if actual is None:
            return False
        if op == "is_nan":
            return math.isnan(actual)
        if op == "is_inf":
            return math.isinf(actual)
        if op == "not_finite":
            return not math.isfinite(actual)
        if op in ("ratio_to_median_above", "ratio_to_best_above"):
            return actual > threshold
        if op == "ratio_to_median_below":
            return actual < threshold
        return _COMPARE[op](actual, threshold)

    def expected(self):
        m = self.metric
        warm = f" (from step {m.min_step})" if m.min_step else ""
        if m.consecutive > 1:
            warm += f", for the last {m.consecutive} logged values"
        if m.op in ("is_nan", "is_inf", "not_finite"):
            return f"{m.name} {m.op}{warm}"
        if m.op == "ratio_to_best_above":
            return f"{m.name} / lowest rolling median so far > {m.value}{warm}"
        if m.op.startswith("ratio_to_median"):
            side = ">" if m.op.endswith("above") else "<"
            return f"{m.name} / rolling median {side} {m.value}{warm}"
        return f"{m.name} {m.op} {m.value}{warm}"


# --- the trainer process -------------------------------------------------------------------------
class ExitSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    codes: list[int] = Field(default_factory=list, description="exit codes (negative = killed by signal)")
    signals: list[str] = Field(default_factory=list, description="signal names, e.g. SIGTERM")
    nonzero: bool = Field(False, description="any non-zero exit")
    unknown: bool = Field(False, description="the trainer is gone and how it ended cannot be learned (its launcher died too)")

    @field_validator("signals")
    @classmethod
    def _known(cls, value):
        unknown = [s for s in value if s not in SIGNALS]
        if unknown:
            raise ValueError(f"unknown signal(s) {unknown}; known: {sorted(SIGNALS)}")
        return value


class ExitClause(Clause):
    exit: ExitSpec

    def _observe(self, ctx):
        trainer = ctx.state.trainer
        return None if trainer.alive else (trainer.exit_code, trainer.signal)

    def check(self, ctx):  # _holds(_observe(ctx)) inlined: the most common clause, false while training
        trainer = ctx.state.trainer
        return not trainer.alive and self._holds((trainer.exit_code, trainer.signal))

    def _holds(self, actual):
        if actual is None:
            return False
        code, signal = actual
        spec = self.exit
        return (
            (code is not None and code in spec.codes)
            or (signal is not None and signal in spec.signals)
            or (spec.nonzero and code not in (0, None))
            or (spec.nonzero and code is None and signal is not None)
            or (spec.unknown and code is None and signal is None)
        )

    def expected(self):
        parts = [f"code in {self.exit.codes}"] if self.exit.codes else []
        parts += [f"signal in {self.exit.signals}"] if self.exit.signals else []
        parts += ["non-zero exit"] if self.exit.nonzero else []
        parts += ["an unknown exit status"] if self.exit.unknown else []
        return "trainer exited with " + " or ".join(parts or ["(nothing)"])


class StalledSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    seconds: float | None = Field(None, gt=0, description="default: the run's derived hang timeout (state.hang_timeout_s)")


class StalledClause(Clause):
    stalled: StalledSpec

    def _observe(self, ctx):
        if not ctx.state.trainer.alive:
            return None
        return ctx.state.seconds_since_progress

    def _limit(self, ctx) -> float:
        return self.stalled.seconds or ctx.state.hang_timeout_s

    def check(self, ctx):
        actual = self._observe(ctx)
        return actual is not None and actual >= self._limit(ctx)

    def explain(self, ctx):
        actual = self._observe(ctx)
        limit = self._limit(ctx)
        return Explanation("stalled", actual is not None and actual >= limit,
                           f"alive trainer without progress for >= {limit:g} s", _show(actual))


# --- disk, checkpoints, throughput ---------------------------------------------------------------
class DiskSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    free_bytes_below: int | None = Field(None, ge=0)
    free_percent_below: float | None = Field(None, ge=0, le=100)
    free_below_checkpoint_factor: float | None = Field(None, gt=0, description="free < factor x last checkpoint size")

    @model_validator(mode="after")
    def _one(self):
        if sum(v is not None for v in (self.free_bytes_below, self.free_percent_below, self.free_below_checkpoint_factor)) != 1:
            raise ValueError("give exactly one of free_bytes_below, free_percent_below, free_below_checkpoint_factor")
        return self


class DiskClause(Clause):
    disk: DiskSpec

    def _observe(self, ctx):
        disk = ctx.state.disk
        if not disk.total_bytes:
            return None
        if self.disk.free_percent_below is not None:
            return disk.free_percent
        return disk.free_bytes

    def _threshold(self, ctx):
        if self.disk.free_below_checkpoint_factor is not None:
            size = ctx.state.checkpoints.last_size_bytes
            return self.disk.free_below_checkpoint_factor * size if size else None
        return self.disk.free_bytes_below if self.disk.free_bytes_below is not None else self.disk.free_percent_below

    def check(self, ctx):
        actual, threshold = self._observe(ctx), self._threshold(ctx)
        return actual is not None and threshold is not None and actual < threshold

    def explain(self, ctx):
        actual, threshold = self._observe(ctx), self._threshold(ctx)
        unit = "%" if self.disk.free_percent_below is not None else " bytes"
        return Explanation("disk", self.check(ctx), f"free < {threshold}{unit}", _show(actual))


class CheckpointSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    corrupt: bool = Field(True, description="true: some checkpoint failed verification")


class CheckpointClause(Clause):
    checkpoint: CheckpointSpec

    def _observe(self, ctx):
        return list(ctx.state.checkpoints.corrupt_steps)

    def _holds(self, actual):
        return bool(actual) == self.checkpoint.corrupt

    def expected(self):
        return "a corrupt checkpoint" if self.checkpoint.corrupt else "no corrupt checkpoint"


class ThroughputSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    below_baseline_fraction: float = Field(gt=0, lt=10, description="tokens/s < fraction x the run's baseline")


class ThroughputClause(Clause):
    throughput: ThroughputSpec

    def _observe(self, ctx):
        m = ctx.state.metrics
        if m.tokens_per_sec is None or not m.baseline_tokens_per_sec:
            return None
        return m.tokens_per_sec / m.baseline_tokens_per_sec

    def _holds(self, actual):
        return actual is not None and actual < self.throughput.below_baseline_fraction

    def expected(self):
        return f"tokens/s < {self.throughput.below_baseline_fraction} x baseline"


# --- expressions and combinators -----------------------------------------------------------------
class ExprClause(Clause):
    expr: str = Field(description="Jinja2 expression over `state` and `config`; must yield true/false")

    @field_validator("expr")
    @classmethod
    def _compiles(cls, value: str) -> str:
        compile_expression(value)  # raises ExpressionError (a ValueError) with the reason
        return value

    @property
    def compiled(self) -> Expression:
        return _compiled(self.expr)

    def check(self, ctx):
        # One condition often guards several playbooks ("state.trainer.alive"): evaluate it once.
        outcome = ctx.expr_results.get(self.expr)
        if outcome is None:
            outcome = ctx.expr_results[self.expr] = evaluate_condition(self.compiled, ctx.expr_context)
        value, error = outcome
        if error:
            ctx.errors.append(error)
        return value

    def explain(self, ctx):
        value, error = evaluate_condition(self.compiled, ctx.expr_context)
        return Explanation("expr", value, self.expr, error or repr(value))


_EXPR_CACHE: dict[str, Expression] = {}


def _compiled(source: str) -> Expression:
    if source not in _EXPR_CACHE:
        _EXPR_CACHE[source] = compile_expression(source)
    return _EXPR_CACHE[source]


class AllClause(Clause):
    all: list["AnyClause"] = Field(min_length=1)

    def check(self, ctx):
        for clause in self.all:  # a plain loop: all() over a generator costs more than most clauses
            if not clause.check(ctx):
                return False
        return True

    def explain(self, ctx):
        children = [c.explain(ctx) for c in self.all]
        return Explanation("all", all(c.matched for c in children), "every clause", "", children)


class AnyOfClause(Clause):
    any: list["AnyClause"] = Field(min_length=1)

    def check(self, ctx):
        for clause in self.any:
            if clause.check(ctx):
                return True
        return False

    def explain(self, ctx):
        children = [c.explain(ctx) for c in self.any]
        return Explanation("any", any(c.matched for c in children), "at least one clause", "", children)


class NotClause(Clause):
    not_: "AnyClause" = Field(alias="not")

    def kind(self):
        return "not"

    def check(self, ctx):
        return not self.not_.check(ctx)

    def explain(self, ctx):
        child = self.not_.explain(ctx)
        return Explanation("not", not child.matched, "the clause below does not match", "", [child])


CLAUSE_TYPES: dict[str, type[Clause]] = {
    "log": LogClause, "metric": MetricClause, "exit": ExitClause, "stalled": StalledClause,
    "disk": DiskClause, "checkpoint": CheckpointClause, "throughput": ThroughputClause,
    "expr": ExprClause, "all": AllClause, "any": AnyOfClause, "not": NotClause,
}


def _clause_tag(value: Any) -> str | None:
    if isinstance(value, dict):
        keys = [k for k in value if k in CLAUSE_TYPES]
        return keys[0] if len(keys) == 1 and len(value) == 1 else None
    if isinstance(value, Clause):
        return value.kind()
    return None


AnyClause = Annotated[
    Union[tuple(Annotated[cls, Tag(tag)] for tag, cls in CLAUSE_TYPES.items())],  # type: ignore[misc]
    Discriminator(
        _clause_tag,
        custom_error_type="clause",
        custom_error_message="a clause is a mapping with exactly one of: " + ", ".join(CLAUSE_TYPES),
    ),
]

for _cls in (AllClause, AnyOfClause, NotClause):
    _cls.model_rebuild()
NotClause.model_config["populate_by_name"] = True


def iter_clauses(clause: Clause) -> Iterator[Clause]:
    """The clause and every clause below it, depth first."""
    yield clause
    children = clause.all if isinstance(clause, AllClause) else clause.any if isinstance(clause, AnyOfClause) else \
        [clause.not_] if isinstance(clause, NotClause) else []
    for child in children:
        yield from iter_clauses(child)

