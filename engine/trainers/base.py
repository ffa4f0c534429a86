"""The small interface a trainer must offer so the engine can supervise it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from engine.events import Event


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start the trainer once: argv, environment, and what it was given."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    config_file: Path                 # the generated trainer config of this launch
    resume_from: Path | None          # the checkpoint file passed to the trainer, if any
    hyperparameters: dict = field(default_factory=dict)
    memory_limit_bytes: int | None = None   # RLIMIT_AS for the trainer process


class TrainerAdapter(Protocol):
    name: str

    def is_installed(self) -> bool: ...

    def prepare_launch(self, loaded, launch_dir: Path, resume_from: Path | None) -> LaunchSpec:
        """Write the trainer config for this launch and return how to start it."""

    def parse_line(self, line: str) -> Event | None: ...

    def checkpoint_file(self, step_dir: Path) -> Path:
        """The file the trainer resumes from, inside a step folder."""

    def read_progress(self, checkpoint_file: Path) -> dict:
        """{'iter_num': ..., 'step_count': ...} stored in a checkpoint."""
