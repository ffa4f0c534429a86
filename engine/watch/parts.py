"""The watch loop's parts, lent to what it runs: the incident runner (which hands the actions their ports,
engine/language/actions/ports.py) and upkeep. One typed bag, built once by the supervisor; the supervisor
itself is reached only as the RunSession below, the one owner of the run's phase."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from engine.checkpoints.catalog import CheckpointCatalog
from engine.core.events import Publish
from engine.core.notifier import Notifier
from engine.core.state import RunPhase
from engine.language.actions.ports import SessionPort
from engine.process.trainer_control import TrainerControl
from engine.records.incident_store import IncidentStore
from engine.records.journal import Journal


class RunSession(SessionPort, Protocol):
    """The run session (engine/watch/supervisor.Supervisor): what actions may ask of it, and its phase machine."""

    def transition(self, to: RunPhase, reason: str) -> None: ...   # the run's phase machine, journaled
    def status(self) -> dict: ...   # run phase, launches, step, tokens, tokens/s (heartbeat)


@dataclass(frozen=True)
class WatchParts:
    control: TrainerControl                          # the trainer and the run config in force
    catalog: CheckpointCatalog                       # verified checkpoints, quarantine, prune
    journal: Journal
    store: IncidentStore                             # incident records (held in memory on a full disk)
    notifier: Notifier
    events: Publish                                  # the event bus (engine/core/events.py)
    session: RunSession                              # the loop's owner: launch, observe, transition
    held: Callable[[], dict[str, int]]               # what a full disk holds back, by kind

    @property
    def tokens_per_step(self) -> int:
        return self.control.progress_meaning.step_tokens
