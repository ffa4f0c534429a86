"""The interface a trainer offers so the engine can supervise it; the engine speaks only through it.

The engine's part of the contract: each checkpoint is one folder directly inside out_dir, whose
name tells its step (``CheckpointLayout.step_of``). Everything inside the folder, the log lines,
how to launch and how to resume belong to the trainer's package (``engine/trainers/<name>/``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from engine.events import Event

if TYPE_CHECKING:
    from engine.checkpoints import Checkpoint


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
    warm_spare_dir: Path | None = None      # where a warm spare for the next launch waits (engine/warm_spare.py)
    warm_imports: tuple[str, ...] = ()      # the modules such a spare imports ahead of time
    training_marker: str = ""               # a log line starting so shows the trainer trains (the spare starts then)


@dataclass(frozen=True)
class ResumePlan:
    """The file to hand the trainer, one line for the journal, and a note for the incident if any."""

    file: Path
    detail: str
    note: str | None = None


class CheckpointLayout(Protocol):
    """How one trainer lays its checkpoints out in out_dir."""

    final_name: str | None                 # the folder the last save of a finished run goes to
    checkpoint_files: frozenset[str]       # every file the trainer's save may put in a checkpoint folder
    required_files: tuple[str, ...]        # files besides the resume file a complete checkpoint has

    def step_of(self, folder_name: str) -> int | None:
        """The step a direct child of out_dir holds, or None when the name is not a step checkpoint's."""

    def folder_name(self, step: int) -> str:
        """The folder name the trainer gives the checkpoint of `step`."""

    def resume_file(self, folder: Path) -> Path:
        """The file inside a checkpoint folder that the trainer resumes from."""

    def step_in_path(self, path: str) -> int | None:
        """The step a resume path names (a checkpoint's file, or a rewritten copy of it)."""

    def scan(self, folder: Path, want_sha256: bool) -> tuple[str | None, dict[str, str]]:
        """Check the trainer's own format without loading it: (one-line problem or None, and the
        sha256 of each file it read whole when want_sha256, so sealing does not read it twice)."""

    def looks_whole(self, folder: Path) -> bool:
        """Cheap: does the resume file look completely written (for spotting interrupted saves)?"""

    def announced_saves(self, log_text: bytes, out_dir: Path) -> set[str]:
        """PURE. Folder names of out_dir whose save the trainer's log text announces."""


class TrainerAdapter(Protocol):
    name: str
    layout: CheckpointLayout
    install_hint: str                      # how to install it, said when is_installed() is False

    def is_installed(self) -> bool: ...

    def check_environment(self, loaded) -> list[str]:
        """What this machine or the run's files lack for the trainer to start (a device, a tokenizer
        file, a config key the trainer refuses), one sentence each naming the fix and, for a config
        value, its file:line; [] when nothing. The trainer's part of the preflight (engine/preflight.py),
        asked by `runbook check` and by `runbook watch` before any launch, once the data is in place."""

    def data_fingerprint(self, loaded) -> str | None:
        """The data_hash of a run whose data the trainer's own data module reads (data.kind:
        data-module); None where runbook's own hash of the .txt folders applies."""

    def prepare_launch(self, loaded, launch_dir: Path, resume_from: Path | None, data_hash: str) -> LaunchSpec:
        """Write the trainer config for this launch and return how to start it."""

    def parse_line(self, line: str) -> Event | None:
        """What one line of the trainer's output means, if anything."""

    def prepare_resume(self, checkpoint: Checkpoint, loaded, scratch_dir: Path) -> ResumePlan:
        """The file to resume `checkpoint` with under today's run config; a rewritten copy goes under
        scratch_dir (never into the checkpoint) when the config changed something the file records."""

    def find_nonfinite(self, checkpoint: Checkpoint, limit: int) -> list[str]:
        """Names of the model's parameters holding NaN/Inf in a checkpoint, at most `limit`."""

    def relocate_run_dir(self, checkpoint: Checkpoint, old_run_dir: Path, new_run_dir: Path) -> int:
        """Rewrite paths under old_run_dir recorded in a checkpoint COPY to lie under new_run_dir
        (a replay runs in a folder of its own); returns how many changed."""

    def share_run_data(self, source_run_dir: Path, scratch_run_dir: Path) -> list[Path]:
        """Make what the trainer derived from the data in one run folder (litgpt: its tokenized cache)
        readable by a scratch run (a drill, a replay) without deriving it again; returns what it linked."""
