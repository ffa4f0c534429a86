"""The interface a trainer offers so the engine can supervise it; the engine speaks only through it.

The engine's part of the contract: each checkpoint is one folder directly inside out_dir, whose
name tells its step (``CheckpointLayout.step_of``). Everything inside the folder, the log lines,
how to launch and how to resume belong to the trainer's package (``engine/trainers/<name>/``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from engine.checkpoints.layout import CheckpointLayout  # noqa: F401 - part of the adapter's interface
from engine.observe.events import Event
from engine.observe.throughput import (  # noqa: F401 - part of the adapter's interface
    ProgressMeaning, accumulation, micro_batch_meaning, optimizer_step_meaning)
from engine.process.launch_spec import LaunchSpec  # noqa: F401 - part of the adapter's interface

if TYPE_CHECKING:
    from engine.checkpoints.store import Checkpoint
    from engine.core.config import LoadedConfig, RunConfig


@dataclass(frozen=True)
class ResumePlan:
    """The file to hand the trainer, one line for the journal, and a note for the incident if any."""

    file: Path
    detail: str
    note: str | None = None


# The Metrics (engine/core/state.py) a playbook's `metric` clause may name, and those every trainer's progress
# and validation lines give; an adapter says in `metrics_provided` which of the others its output fills.
PLAYBOOK_METRICS = frozenset({"loss", "val_loss", "tokens_per_sec", "grad_norm", "lr", "step", "tokens"})
EVERY_TRAINER_METRICS = frozenset({"loss", "val_loss", "tokens_per_sec", "step", "tokens"})


def metrics_provided_by(adapter: object) -> frozenset[str] | None:
    """The playbook metrics the adapter's trainer output can fill; None: it does not say (nothing is refused)."""
    return getattr(adapter, "metrics_provided", None)


class TrainerAdapter(Protocol):
    name: str
    layout: CheckpointLayout
    install_hint: str                      # how to install it, said when is_installed() is False
    metrics_provided: frozenset[str]       # PLAYBOOK_METRICS its output fills: a playbook on another is refused

    def progress_meaning(self, config: RunConfig) -> ProgressMeaning:
        """What one progress line stands for in tokens (engine/observe/throughput.py): per iter_num unit, per line's
        time, per optimizer step, all ranks together, under this run config (RunConfig)."""

    def is_installed(self) -> bool: ...

    def check_environment(self, loaded: LoadedConfig) -> list[str]:
        """What this machine or the run's files lack for the trainer to start (a device, a tokenizer
        file, a config key the trainer refuses), one sentence each naming the fix and, for a config
        value, its file:line; [] when nothing. The trainer's part of the preflight (engine/trainers/preflight.py),
        asked by `runbook check` and by `runbook watch` before any launch, once the data is in place."""

    def data_fingerprint(self, loaded: LoadedConfig) -> str | None:
        """The data_hash of a run whose data the trainer's own data module reads (data.kind:
        data-module); None where runbook's own hash of the .txt folders applies."""

    def prepare_launch(self, loaded: LoadedConfig, launch_dir: Path, resume_from: Path | None, data_hash: str) -> LaunchSpec:
        """Write the trainer config for this launch and return how to start it."""

    def parse_line(self, line: str) -> Event | None:
        """What one line of the trainer's output means, if anything."""

    def prepare_resume(self, checkpoint: Checkpoint, loaded: LoadedConfig, scratch_dir: Path) -> ResumePlan:
        """The file to resume `checkpoint` with under today's run config; a rewritten copy goes under
        scratch_dir (never into the checkpoint) when the config changed something the file records."""

    def find_nonfinite(self, checkpoint: Checkpoint, limit: int) -> list[str]:
        """Names of the model's parameters holding NaN/Inf in a checkpoint, at most `limit`; raises
        engine.checkpoints.rollback.UnreadableWeights (one line: which file, why) when it cannot tell."""

    def relocate_run_dir(self, checkpoint: Checkpoint, old_run_dir: Path, new_run_dir: Path) -> int:
        """Rewrite paths under old_run_dir recorded in a checkpoint COPY to lie under new_run_dir
        (a replay runs in a folder of its own); returns how many changed."""

    def share_run_data(self, source_run_dir: Path, scratch_run_dir: Path) -> list[Path]:
        """Make what the trainer derived from the data in one run folder (litgpt: its tokenized cache)
        readable by a scratch run (a drill, a replay) without deriving it again; returns what it linked."""
