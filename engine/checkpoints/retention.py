"""The run's retention policy, in one place: keep the newest keep_last_k sealed checkpoints plus the
best by validation loss, never a save in progress and never the only good one (the ledger refuses).

Three moments apply it (each new sealed save, upkeep's clock, the run's completion), all through
`retain`, with one source of "best": the observer's tracker of validation losses.
"""

from __future__ import annotations


def retain(ledger, keep_last_k: int, best_step: int | None, trainer_alive: bool):
    """Apply keep_last_k + best now; the ledger's PruneResult. A ValueError is the ledger's refusal
    to delete (it is reported by the caller, never forced)."""
    return ledger.prune(keep_last_k, best_step, remove_partial=False, trainer_alive=trainer_alive)
