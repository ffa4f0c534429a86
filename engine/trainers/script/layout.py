"""A checkpoint folder per save directly in out_dir, named <prefix><step> (`step-000020` for a script,
`checkpoint-20` for the HF Trainer), one resume file inside, each file checked by its own format."""

from __future__ import annotations

import re
from pathlib import Path

from engine.trainers.script import formats, lines


class FolderLayout:
    final_name = "final"

    def __init__(self, prefix: str, resume_name: str, width: int, checkpoint_files: frozenset[str],
                 required_files: tuple[str, ...] = (), patterns: tuple[re.Pattern[str], ...] = ()):
        self.prefix, self.resume_name, self.width = prefix, resume_name, width
        self.checkpoint_files = checkpoint_files | {resume_name}
        self.checkpoint_patterns = patterns   # names with a rank or a shard number in them
        self.required_files = required_files
        self._name = re.compile(rf"^{re.escape(prefix)}(\d{{1,12}})$")
        self._in_path = re.compile(rf"{re.escape(prefix)}(\d{{1,12}})")

    def writes(self, name: str) -> bool:
        """Is `name` a file the trainer's save writes into a checkpoint folder?"""
        return name in self.checkpoint_files or any(p.fullmatch(name) for p in self.checkpoint_patterns)

    def step_of(self, folder_name: str) -> int | None:
        m = self._name.match(folder_name)
        return int(m.group(1)) if m else None

    def folder_name(self, step: int) -> str:
        return f"{self.prefix}{step:0{self.width}d}"

    def resume_file(self, folder: Path) -> Path:
        return Path(folder) / self.resume_name

    def step_in_path(self, path: str) -> int | None:
        found = self._in_path.findall(str(path))
        return int(found[-1]) if found else None

    def scan(self, folder: Path, want_sha256: bool) -> tuple[str | None, dict[str, str]]:
        folder = Path(folder)
        if not self.resume_file(folder).is_file():
            return f"no {self.resume_name}", {}
        # The trainer's own files only (runbook's manifest is checked by runbook): sorted, so answers repeat.
        files = sorted(p for p in folder.iterdir() if self.writes(p.name) and p.is_file())
        return formats.scan_files(files, want_sha256)

    def looks_whole(self, folder: Path) -> bool:
        return formats.whole(self.resume_file(folder))

    def announced_saves(self, log_text: bytes, out_dir: Path) -> set[str]:
        return lines.announced_folders(log_text, out_dir,
                                       lambda name: name == self.final_name or self.step_of(name) is not None)
