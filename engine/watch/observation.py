"""One observation of the run, in the order that makes it true: the trainer process, then its new log
lines, then the checkpoints (sealing finished saves, pruning to keep_last_k + best as each is sealed),
then the snapshot the playbooks see. The watch loop and every incident's runtime observe through here.
"""

from __future__ import annotations

import time

from engine.core.events import Observed, Publish, WatchWarning
from engine.checkpoints import retention
from engine.checkpoints.catalog import CheckpointCatalog
from engine.core.state import RunPhase, StateSnapshot
from engine.observe.observer import Observer
from engine.process.trainer_control import TrainerControl
from engine.records.journal import Journal


class Observation:
    def __init__(self, control: TrainerControl, observer: Observer, catalog: CheckpointCatalog, journal: Journal,
                 events: Publish):
        self.control, self.observer, self.catalog, self.journal, self.events = control, observer, catalog, journal, events
        catalog.warn = lambda text: events(WatchWarning(text))   # another run's out_dir inside this one's
        self.last: StateSnapshot | None = None
        self.retention = retention.Retention(catalog, lambda: control.loaded.config.keep_last_k, self.best_val_step,
                                             lambda text: events(WatchWarning(text)))

    def take(self, run_state: RunPhase, retain: bool = False) -> StateSnapshot:
        """retain (the watch loop's own tick): prune first when a save was sealed, so the snapshot's disk
        and checkpoints are what the playbooks will act on."""
        now = time.time()
        # The process first, then its log: a trainer seen dead has written all it ever will (its output goes
        # straight to the log file), so its last lines (an OOM, a traceback) are in this same snapshot. The
        # other order lets a trainer that writes its error and exits in between look like an exit with no
        # message, which only unknown-crash matches.
        trainer = self.control.status()
        new_lines = self.observer.read_lines(now)
        self.catalog.refresh(saving_from_step=self.saving_from())
        if retain:
            self._retain_new_saves()
        self.last = self.observer.snapshot(now, run_state, trainer, self.catalog.status(), new_lines,
                                           self.control.loaded.config.watch)
        self.events(Observed(self.last, tuple(new_lines)))
        return self.last

    def saving_from(self) -> int | None:
        """A live trainer may still be writing the checkpoint of its current step (or a later one)."""
        return (self.observer.tracker.step or 0) if self.control.alive else None

    def best_val_step(self) -> int | None:
        """The one source of "best" for retention and the prune action: the observer's tracker."""
        return self.observer.tracker.best_val_step

    def _retain_new_saves(self) -> None:
        """Retention as each save is sealed (off with upkeep's retention: interval null)."""
        if self.control.loaded.config.upkeep.retention_interval_s is None:
            return
        result = self.retention.after_new_saves(trainer_alive=self.control.alive)
        if result is not None and result.deleted:
            self.journal.append("retention", summary=result.summary())

    def retain_at_completion(self) -> None:
        self.catalog.refresh(force=True)  # seal the checkpoints saved in the last moments
        if (result := self.retention.now(trainer_alive=False)) is not None:   # once more, the run being over
            self.journal.append("retention", summary=result.summary())
