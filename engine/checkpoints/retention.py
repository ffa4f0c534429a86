"""The run's retention policy, in one place: keep the newest keep_last_k sealed checkpoints plus the
best by validation loss, never a save in progress and never the only good one (the catalog refuses).

Four moments apply it (each new sealed save, upkeep's clock, the run's completion, a playbook's
prune_checkpoints), all through `retain`, with one source of "best": the observer's tracker of validation losses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from engine.checkpoints.catalog import PruneResult


class PruningCatalog(Protocol):
    """What retention asks of the catalog (engine/checkpoints/catalog.CheckpointCatalog, or an action's port to it)."""

    @property
    def verified(self) -> set[int]: ...

    def prune(self, keep_last_k: int, best_step: int | None, remove_partial: bool, trainer_alive: bool) -> PruneResult: ...


def retain(catalog: PruningCatalog, keep_last_k: int, best_step: int | None, trainer_alive: bool,
           remove_partial: bool = False) -> PruneResult:
    """Apply keep_last_k + best now (remove_partial: leftovers of interrupted saves first); the catalog's
    PruneResult. A ValueError is the catalog's refusal to delete (it is reported by the caller, never forced)."""
    return catalog.prune(keep_last_k, best_step, remove_partial=remove_partial, trainer_alive=trainer_alive)


class Retention:
    """The policy bound to one run: its catalog, its keep_last_k (a recovery may rewrite it), its one
    source of "best", and where a refusal is said."""

    def __init__(self, catalog: PruningCatalog, keep_last_k: Callable[[], int], best_step: Callable[[], int | None],
                 warn: Callable[[str], None]):
        self.catalog = catalog
        self.keep_last_k = keep_last_k
        self.best_step = best_step
        self.warn = warn
        self._verified_seen = 0   # checkpoints verified when after_new_saves last looked

    def now(self, trainer_alive: bool) -> PruneResult | None:
        """Apply it now; None when the catalog refused (said through warn, never forced)."""
        try:
            return retain(self.catalog, self.keep_last_k(), self.best_step(), trainer_alive)
        except ValueError as error:
            self.warn(f"retention skipped: {error}")
            return None

    def after_new_saves(self, trainer_alive: bool) -> PruneResult | None:
        """keep_last_k + best as soon as a new save is sealed, not only on upkeep's clock: a run that saves
        faster than upkeep's retention interval (a short save_interval, a small disk) otherwise piles up
        checkpoints between two passes until its disk is full (seen: a 13 MB out_dir, a 2 MB save every
        0.3 s: disk-full four times, then an escalation). None when nothing new was sealed."""
        verified = len(self.catalog.verified)
        if verified == self._verified_seen:
            return None
        self._verified_seen = verified
        if verified <= self.keep_last_k() + 1:
            return None
        result = self.now(trainer_alive)
        self._verified_seen = len(self.catalog.verified)
        return result
