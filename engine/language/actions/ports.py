"""What an action may touch, as typed ports: the trainer, the checkpoints, the journal, people, and the run
session. An action's `apply(p, ports: ActionPorts)` does its effect itself, in its own module, through these.

The ports are Protocols over the engine's own parts (engine/process/trainer_control.TrainerControl,
engine/checkpoints/catalog.CheckpointCatalog, engine/records/journal.Journal, engine/core/notifier.Notifier, the
watch loop's session): engine/watch only wires them (engine/watch/incident_runner.py), and nothing here imports
or calls into engine/watch. What several actions of one incident share (did it resume? from which bad step?)
is the typed IncidentEffects the incident runner reads once the actions ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:   # types only: loading a playbook imports the actions, and needs none of these
    from engine.checkpoints.layout import CheckpointLayout
    from engine.checkpoints.catalog import PruneResult
    from engine.checkpoints.rollback import RollbackResult
    from engine.checkpoints.store import Checkpoint
    from engine.core.config import LoadedConfig
    from engine.core.events import Publish
    from engine.core.state import StateSnapshot
    from engine.records.incident import Incident
    from engine.records.journal import JournalReplay


class ProcessView(Protocol):
    """The trainer process, read-only (a diagnosis samples it; compress_logs spares the log it writes)."""

    @property
    def pid(self) -> int: ...
    @property
    def alive(self) -> bool: ...
    @property
    def log_path(self) -> Path: ...


class ResumePlanView(Protocol):
    @property
    def file(self) -> Path: ...
    @property
    def detail(self) -> str: ...
    @property
    def note(self) -> str | None: ...


class ResumeAdapter(Protocol):
    def prepare_resume(self, checkpoint: Checkpoint, loaded: LoadedConfig, scratch_dir: Path) -> ResumePlanView: ...


class TrainerPort(Protocol):
    """The trainer and the run config in force (engine/process/trainer_control.TrainerControl)."""

    @property
    def loaded(self) -> LoadedConfig: ...   # a recovery may rewrite it: read it each time
    @property
    def alive(self) -> bool: ...
    @property
    def process(self) -> ProcessView | None: ...
    @property
    def adapter(self) -> ResumeAdapter: ...

    def stop(self, reason: str) -> str: ...
    def write_config(self, updates: dict) -> None: ...
    def env_in_force(self) -> dict[str, str]: ...
    def set_env(self, variables: dict, diagnostic: bool = False, incident: str | None = None) -> list[str]: ...
    def note_env_change(self, incident: str | None, names: list[str], tokens_per_sec_before: float | None) -> None: ...


class CheckpointPort(Protocol):
    """Verified checkpoints, quarantine, rollback, prune (engine/checkpoints/catalog.CheckpointCatalog)."""

    @property
    def layout(self) -> CheckpointLayout: ...
    @property
    def verified(self) -> set[int]: ...

    def checkpoints(self) -> list[Checkpoint]: ...
    def newest_verified(self) -> Checkpoint | None: ...
    def refresh(self, saving_from_step: int | None = None, quarantine_corrupt: bool = False,
                force: bool = False, sealed_only: bool = False) -> list[str]: ...
    def rollback(self, bad_step: int, steps: int, scan_nonfinite: bool, why: str) -> RollbackResult: ...
    def mark_suspect(self, step: int, reason: str) -> Path | None: ...
    def prune(self, keep_last_k: int, best_step: int | None, remove_partial: bool, trainer_alive: bool) -> PruneResult: ...


class JournalPort(Protocol):
    """The run's journal (engine/records/journal.Journal)."""

    def append(self, kind: str, **data: object) -> dict: ...
    def replay(self) -> JournalReplay: ...


class NoticePort(Protocol):
    """People: the incident's thread (engine/core/notifier.Notifier)."""

    def incident_update(self, incident_id: str, text: str) -> None: ...


class SessionPort(Protocol):
    """The run session that owns the loop's state (engine/watch/supervisor.Supervisor): the only one that
    launches the trainer and follows it, and the one source of the run's figures."""

    @property
    def divergences(self) -> list[int]: ...   # first bad steps of the run's divergence rollbacks

    def launch(self, resume_file: Path | None) -> None: ...
    def observe(self) -> StateSnapshot: ...
    def best_val_step(self) -> int | None: ...
    def saving_from(self) -> int | None: ...
    def save_interval_advice(self) -> str | None: ...


@dataclass
class IncidentEffects:
    """What the actions of one incident learnt, shared between them and read by the incident runner after."""

    resumed: bool = False
    bad_step: int | None = None          # the first bad step of this incident's rollback (skip_data reads it)
    verified_all: bool = False           # a full verification already ran in this incident
    escalated_reason: str | None = None


@dataclass
class ActionPorts:
    """Everything an action may use for one incident; the incident record is written through `incident`."""

    incident: Incident
    trainer: TrainerPort
    checkpoints: CheckpointPort
    journal: JournalPort
    notices: NoticePort
    session: SessionPort
    events: Publish                      # the event bus (engine/core/events.py)
    effects: IncidentEffects = field(default_factory=IncidentEffects)

    @property
    def loaded(self) -> LoadedConfig:
        return self.trainer.loaded

    @property
    def state(self) -> StateSnapshot:
        """The snapshot the playbook matched."""
        return self.incident.state

    def note(self, text: str) -> None:
        self.incident.note(text)
