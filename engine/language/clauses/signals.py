"""`signals`: the signals the trainer's processes died of, from every report a dead group leaves."""

from __future__ import annotations

import signal as _signal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from engine.core.rank_signals import CRASH_SIGNALS, reports_from_log, reports_from_ranks, same_signal_everywhere
from engine.language.clauses.base import Clause, MatchContext


class SignalsSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    any_of: list[str] = Field(default_factory=list, description="signal names; without every_rank: some process died of one of them")
    every_rank: bool = Field(False, description="every process reported dead died of the same one signal (of any_of, default the crash signals SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE)")
    min_ranks: int = Field(2, ge=2, le=4096, description="with every_rank: at least this many processes reported")

    @field_validator("any_of")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = [s for s in value if s not in _signal.Signals.__members__ or not s.startswith("SIG")]
        if unknown:
            raise ValueError(f"unknown signal(s) {unknown}; e.g. SIGBUS, SIGSEGV, SIGABRT")
        return value

    @model_validator(mode="after")
    def _says_something(self) -> "SignalsSpec":
        if not self.any_of and not self.every_rank:
            raise ValueError("give any_of (signal names), every_rank: true, or both")
        return self


class SignalsClause(Clause[tuple[list[str | None], str | None]]):
    kind = "signals"
    doc = ("The trainer's processes died of these signals, read from every report a dead group leaves: the ranks' "
           "own exit records, the launcher's summary (torchrun's `exitcode  : -7 (pid: N)` and `Signal 7 (SIGBUS) "
           "received by PID N`, deepspeed's `exits with return code = -7`, srun's `task 3: Bus error`, torch.multiprocessing's "
           "`process 1 terminated with signal SIGBUS`), a crash handler's line in each process (UCX's `Caught signal 7 "
           "(Bus error ...)`, Open MPI's `Signal: Bus error (7)`, faulthandler's `Fatal Python error: Bus error`) and the "
           "trainer's own exit. `any_of`: some process died of one of them. "
           "`every_rank: true`: at least `min_ranks` processes are reported dead and every one died of the same signal "
           "(one of `any_of`, by default a crash signal): the same fault everywhere at once is the environment's "
           "(/dev/shm, a driver, a config), not one rank's.")
    example = "signals:\n  every_rank: true\n  any_of: [SIGBUS, SIGSEGV]"

    signals: SignalsSpec

    def observe(self, ctx: MatchContext) -> tuple[list[str | None], str | None]:
        """(the signal of each process reported dead, the trainer's own exit signal or None)."""
        state = ctx.state
        reports = reports_from_ranks(state.trainer.ranks.ranks) + reports_from_log(state.tail)
        own = None if state.trainer.alive else ctx.exit_seen()[1]
        return [r.signal for r in reports], own

    def holds(self, observed: tuple[list[str | None], str | None]) -> bool:
        reported, own = observed
        spec = self.signals
        if spec.every_rank:
            return same_signal_everywhere(reported, spec.any_of or CRASH_SIGNALS, spec.min_ranks) is not None
        wanted = set(spec.any_of)
        return own in wanted or any(s in wanted for s in reported)

    def expected(self, ctx: MatchContext) -> str:
        spec = self.signals
        if spec.every_rank:
            return (f"at least {spec.min_ranks} processes reported dead, every one by the same signal of "
                    f"{spec.any_of or list(CRASH_SIGNALS)}")
        return f"a process of the trainer died of {spec.any_of}"

    def show(self, observed: tuple[list[str | None], str | None]) -> str:
        reported, own = observed
        return f"reported {reported or 'none'}; the trainer's own exit signal {own}"
