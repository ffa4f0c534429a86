"""`exit`: the trainer process has ended, with one of these codes or signals."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.language.clauses.base import Clause, MatchContext

SIGNALS = {"SIGHUP": 1, "SIGINT": 2, "SIGKILL": 9, "SIGSEGV": 11, "SIGTERM": 15, "SIGABRT": 6, "SIGBUS": 7}


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
    kind = "exit"
    doc = "The trainer process has exited with one of these codes or signals, or with any non-zero code."
    example = "exit:\n  signals: [SIGTERM]\n  codes: [143]"

    exit: ExitSpec

    def observe(self, ctx: MatchContext) -> tuple[int | None, str | None] | None:
        """(exit code, signal) of an ended trainer; None while it runs."""
        trainer = ctx.state.trainer
        return None if trainer.alive else (trainer.exit_code, trainer.signal)

    def check(self, ctx: MatchContext) -> bool:
        # holds(observe(ctx)) inlined: the commonest clause, checked while the trainer runs (false).
        trainer = ctx.state.trainer
        return not trainer.alive and self.holds((trainer.exit_code, trainer.signal))

    def holds(self, observed) -> bool:
        if observed is None:
            return False
        code, signal = observed
        spec = self.exit
        return (
            (code is not None and code in spec.codes)
            or (signal is not None and signal in spec.signals)
            or (spec.nonzero and code not in (0, None))
            or (spec.nonzero and code is None and signal is not None)
            or (spec.unknown and code is None and signal is None)
        )

    def expected(self, ctx: MatchContext) -> str:
        parts = [f"code in {self.exit.codes}"] if self.exit.codes else []
        parts += [f"signal in {self.exit.signals}"] if self.exit.signals else []
        parts += ["non-zero exit"] if self.exit.nonzero else []
        parts += ["an unknown exit status"] if self.exit.unknown else []
        return "trainer exited with " + " or ".join(parts or ["(nothing)"])
