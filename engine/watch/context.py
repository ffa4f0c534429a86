"""What the watch loop lends to the parts it runs: the incident runner, each incident's runtime and
upkeep. One typed bag, built once by the supervisor; nothing outside watch/ reaches into the
supervisor itself."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine.checkpoints.ledger import CheckpointLedger
from engine.core.events import Publish
from engine.core.notifier import Notifier
from engine.core.state import RunState, StateSnapshot
from engine.process.trainer_control import TrainerControl
from engine.records.incident_store import IncidentStore
from engine.records.journal import Journal


@dataclass(frozen=True)
class WatchContext:
    control: TrainerControl                          # the trainer and the run config in force
    ledger: CheckpointLedger                         # verified checkpoints, quarantine, prune
    journal: Journal
    store: IncidentStore                             # incident records (held in memory on a full disk)
    notifier: Notifier
    events: Publish                                  # the event bus (engine/core/events.py)
    launch: Callable[[Path | None], None]            # start the trainer and follow its log
    observe: Callable[[], StateSnapshot]             # one more observation
    transition: Callable[[RunState, str], None]      # the run's state machine, journaled
    append_run_log: Callable[[dict], None]           # docs/run-log.md (held on a full disk)
    best_val_step: Callable[[], int | None]          # the one source of "best" (the observer's tracker)
    saving_from: Callable[[], int | None]            # a live trainer may still be writing saves from this step on
    save_interval_advice: Callable[[], str | None]
    status: Callable[[], dict]                       # run state, launches, step, tokens, tokens/s (heartbeat)
    held: Callable[[], dict[str, int]]               # what a full disk holds back, by kind
    divergences: list[int]                           # first bad steps of this run's divergence rollbacks (the tracker's)

    @property
    def tokens_per_step(self) -> int:
        config = self.control.loaded.config
        return config.batch_size * config.model.block_size
