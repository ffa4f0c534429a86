"""How one trainer lays its checkpoints out in out_dir: the protocol a trainer's adapter fills in
(engine/trainers/<name>/layout.py), so this package finds, verifies and prunes checkpoints of any trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


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


def trainer_writes(layout: CheckpointLayout, name: str) -> bool:
    """Is `name` a file the trainer's save puts in a checkpoint folder? A layout whose saves hold names with a
    number in them (an HF save's shards, one RNG state per rank) answers through an optional `writes(name)`."""
    writes = getattr(layout, "writes", None)
    return bool(writes(name)) if writes is not None else name in layout.checkpoint_files
