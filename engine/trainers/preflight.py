"""The preflight: what would make a launch fail minutes later, found in seconds before it.

Generic checks live here (the data folders, out_dir's room); what only one trainer needs (its
tokenizer, its config parser, its devices) is its adapter's `check_environment`. Every problem is
one sentence starting with file:line:col of the config value it is about (`at`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from engine.core.yaml_source import SourceError, load_yaml, locate

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig
    from engine.trainers.base import TrainerAdapter

CHECKPOINTS_OF_ROOM = 3   # "a few": the one being written, the newest, and one to fall back to


def at(config_path: Path, loc: tuple) -> str:
    """`file:line:col` of a key in the run config, or the file alone when the key is not written (a default)."""
    try:
        found = locate(load_yaml(config_path), loc)
    except SourceError:
        found = None
    return f"{config_path}:{found[0]}:{found[1]}" if found else str(config_path)


def where(loaded: LoadedConfig, loc: tuple) -> str:
    """`file:line:col` where the user wrote this setting: the trainer's own config file for the keys it
    owns (TrainerSettings.source_line: litgpt's trainer.litgpt_config), else the run config."""
    written = loaded.config.trainer.source_line(loaded, loc)
    return written or at(loaded.path, loc)


def data_folder_problem(key: str, folder: Path) -> str | None:
    """Why `folder` cannot feed the trainer (missing, unreadable, no .txt, only empty .txt), or None."""
    if not folder.exists():
        return f"{key}: folder {folder} does not exist"
    if not folder.is_dir():
        return f"{key}: {folder} is not a folder"
    if not os.access(folder, os.R_OK | os.X_OK):
        return f"{key}: folder {folder} is not readable by this user"
    texts = sorted(folder.glob("*.txt"))
    if not texts:
        return f"{key}: no .txt files in {folder}"
    unreadable = [t.name for t in texts if not os.access(t, os.R_OK)]
    if unreadable:
        return f"{key}: {len(unreadable)} .txt file(s) in {folder} are not readable by this user (first: {unreadable[0]})"
    if not any(t.stat().st_size for t in texts):
        return f"{key}: every .txt file in {folder} is empty"
    return None


def data_problems(loaded: LoadedConfig) -> list[str]:
    if loaded.config.data.kind == "data-module":
        return []   # the trainer's own data module: its adapter checks what it can (check_environment)
    problems = []
    for name in ("train_dir", "val_dir"):
        if problem := data_folder_problem(f"data.{name}", loaded.data_path(name)):
            problems.append(f"{where(loaded, ('data', name))}: {problem}")
    return problems


def existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def human(size: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "bytes" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} TiB"


def out_dir_write_problem(out_dir: Path) -> str | None:
    """Why no file can be written where `out_dir` is (or will be made), or None."""
    base = existing_ancestor(out_dir)
    if not base.is_dir():
        return f"out_dir: {base} is not a folder, so {out_dir} cannot be made"
    try:   # os.access says nothing of a read-only mount or a full disk: write one real (empty) file
        fd, probe = tempfile.mkstemp(prefix=".runbook-preflight-", dir=base)
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        return f"out_dir: cannot write in {base} ({error.strerror or error})"
    return None


def bytes_under(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass   # removed while walking
    return total


def room_problem(out_dir: Path, checkpoint_bytes: int, how: str) -> str | None:
    """Why `out_dir`'s disk cannot hold CHECKPOINTS_OF_ROOM checkpoints of `checkpoint_bytes` (`how`:
    how that size was estimated, said in the sentence), or None. What out_dir already holds counts as
    room: the disk playbooks prune old checkpoints, and a resumed run must not be refused for its own."""
    base = existing_ancestor(out_dir)
    in_out_dir = bytes_under(out_dir) if out_dir.is_dir() else 0
    free, need = shutil.disk_usage(base).free, CHECKPOINTS_OF_ROOM * checkpoint_bytes
    if free + in_out_dir >= need:
        return None
    return (f"out_dir: {base} has {human(free)} free" + (f" (+{human(in_out_dir)} in out_dir)" if in_out_dir else "")
            + f", less than the {human(need)} that {CHECKPOINTS_OF_ROOM} checkpoints need ({human(checkpoint_bytes)} "
            f"each: {how}); free space there or point out_dir at a larger disk")


def preflight(loaded: LoadedConfig, adapter: TrainerAdapter) -> list[str]:
    """Every generic problem, then the trainer's own (its adapter asks litgpt, the tokenizer, devices)."""
    problems = data_problems(loaded)
    if problem := out_dir_write_problem(loaded.out_dir):
        problems.append(f"{where(loaded, ('out_dir',))}: {problem}")
    return problems + list(adapter.check_environment(loaded))
