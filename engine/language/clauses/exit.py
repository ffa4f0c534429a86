"""`exit`: the trainer process has ended, with one of these codes or signals."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.language.clauses.base import Clause, MatchContext

SIGNALS = {"SIGHUP": 1, "SIGINT": 2, "SIGKILL": 9, "SIGSEGV": 11, "SIGTERM": 15, "SIGABRT": 6, "SIGBUS": 7,
           "SIGUSR1": 10, "SIGUSR2": 12}


class ExitSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    codes: list[int] = Field(default_factory=list, description="exit codes (negative = killed by signal)")
    signals: list[str] = Field(default_factory=list, description="signal names, e.g. SIGTERM")
    nonzero: bool = Field(False, description="any non-zero exit")
    unknown: bool = Field(False, description="the trainer is gone and how it ended cannot be learned (its launcher died too)")

    @field_validator("signals")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = [s for s in value if s not in SIGNALS]
        if unknown:
            raise ValueError(f"unknown signal(s) {unknown}; known: {sorted(SIGNALS)}")
        return value


class ExitClause(Clause[tuple[int | None, str | None] | None]):
    kind = "exit"
    doc = ("The trainer process has exited with one of these codes or signals, or with any non-zero code. The signal is "
           "read from the exit code once, the same way everywhere (-N, a shell's 128+N, the 256-N of `sys.exit(-N)`), and "
           "from a launcher's log when the trainer is a launcher (torchrun's `exitcode: -9` / `Signal 9 (SIGKILL) received "
           "by PID`, deepspeed's `exits with return code = -9`, srun's `task 0: Killed`) that only exited 1 itself.")
    example = "exit:\n  signals: [SIGTERM]\n  codes: [143]"

    exit: ExitSpec

    def observe(self, ctx: MatchContext) -> tuple[int | None, str | None] | None:
        """(exit code, signal) of an ended trainer; None while it runs."""
        return None if ctx.state.trainer.alive else ctx.exit_seen()

    def check(self, ctx: MatchContext) -> bool:
        # holds(observe(ctx)) inlined: the commonest clause, checked while the trainer runs (false).
        return not ctx.state.trainer.alive and self.holds(ctx.exit_seen())

    def holds(self, observed: tuple[int | None, str | None] | None) -> bool:
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
