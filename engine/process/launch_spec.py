"""What a trainer's adapter hands the process layer to start the trainer once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

LAUNCHER = Path(__file__).with_name("launcher.py")   # the trainer's parent, run by path (engine/process/launcher.py)


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
    notice_signal: str | None = None        # the trainer saves and exits on it (None: it cannot)
    quit_signal: str = "SIGTERM"            # ends the trainer without a save (a recovery's stop)
    warm_spare_dir: Path | None = None      # where a warm spare for the next launch waits (engine/process/warm_spare.py)
    warm_imports: tuple[str, ...] = ()      # the modules such a spare imports ahead of time
    training_marker: str = ""               # a log line starting so shows the trainer trains (the spare starts then)
