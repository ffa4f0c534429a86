"""`disk`: free space on the checkpoint filesystem is below a limit."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.language.clauses.base import Clause, MatchContext


class DiskSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    free_bytes_below: int | None = Field(None, ge=0)
    free_percent_below: float | None = Field(None, ge=0, le=100)
    free_below_checkpoint_factor: float | None = Field(None, gt=0, description="free < factor x last checkpoint size")

    @model_validator(mode="after")
    def _one(self) -> DiskSpec:
        if sum(v is not None for v in (self.free_bytes_below, self.free_percent_below, self.free_below_checkpoint_factor)) != 1:
            raise ValueError("give exactly one of free_bytes_below, free_percent_below, free_below_checkpoint_factor")
        return self


class DiskClause(Clause[tuple[float | None, float | None]]):
    kind = "disk"
    doc = ("Free space on the checkpoint filesystem is below a number of bytes, a percentage, or a multiple "
           "of the last checkpoint's size. Give exactly one.")
    example = "disk:\n  free_below_checkpoint_factor: 2"

    disk: DiskSpec

    def observe(self, ctx: MatchContext) -> tuple[float | None, float | None]:
        """(free bytes or percent, the limit); either is None while unknown."""
        disk = ctx.state.disk
        if not disk.total_bytes:
            free = None
        else:
            free = disk.free_percent if self.disk.free_percent_below is not None else disk.free_bytes
        return free, self._limit(ctx)

    def holds(self, observed: tuple[float | None, float | None]) -> bool:
        free, limit = observed
        return free is not None and limit is not None and free < limit

    def expected(self, ctx: MatchContext) -> str:
        unit = "%" if self.disk.free_percent_below is not None else " bytes"
        return f"free < {self._limit(ctx)}{unit}"

    def show(self, observed: tuple[float | None, float | None]) -> str:
        return repr(observed[0])

    def _limit(self, ctx: MatchContext) -> float | None:
        if self.disk.free_below_checkpoint_factor is not None:
            size = ctx.state.checkpoints.last_size_bytes
            return self.disk.free_below_checkpoint_factor * size if size else None  # no checkpoint yet: no limit
        return self.disk.free_bytes_below if self.disk.free_bytes_below is not None else self.disk.free_percent_below
