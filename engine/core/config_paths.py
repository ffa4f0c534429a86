"""Where the run config's paths may point: runbook deletes and moves files in out_dir and run_dir,
appends to run_log and moves checkpoints into watch.quarantine_dir, so none of them may be, hold or sit
inside anything else of the user's (the project, the config, the data, system folders). Each problem
is one sentence with file:line; engine/core/config.py refuses to load a config that has one.
"""

from __future__ import annotations

import os
import stat as stat_mode
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from engine.core.run_folder import RunFolder
from engine.core.yaml_source import locate

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig

# Folders no run owns: runbook deletes and moves files in out_dir and run_dir (macOS names included).
SYSTEM_FOLDERS = ("/", "/bin", "/boot", "/dev", "/dev/shm", "/etc", "/home", "/lib", "/lib64", "/media", "/mnt",
                  "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/local", "/var",
                  "/var/tmp", "/Users", "/Volumes", "/System", "/Library", "/private", "/private/tmp")


def run_folder_problem(key: str, folder: Path, other_key: str, other: Path | None, config_file: Path, project_dir: Path,
                       data_dirs: list[tuple[str, Path]], home: Path, system_folders: set[Path], example: str = "") -> str | None:
    """PURE. Why ``folder`` (out_dir or run_dir; every path absolute and resolved) cannot be a folder
    this run owns, as one sentence, or None. runbook deletes and moves files in both, so neither may
    be, hold or sit inside anything else of the user's. With ``other`` (the other of the two), also
    refused: being it or lying inside it (the inner one of a nested pair is the one named)."""
    def within(a: Path, b: Path) -> bool:
        return a == b or b in a.parents

    if folder == home:
        reason = "is your home folder"
    elif folder in system_folders:
        reason = "is a system folder"
    elif folder == project_dir:
        reason = "is the project folder (the one holding configs/)"
    elif within(config_file, folder):
        reason = f"holds the run config {config_file}"
    elif same := next((name for name, d in data_dirs if d == folder), None):
        reason = f"is {same}"
    elif holder := next(((name, d) for name, d in data_dirs if within(d, folder)), None):
        reason = f"holds {holder[0]} ({holder[1]})"
    elif inside := next(((name, d) for name, d in data_dirs if within(folder, d)), None):
        reason = f"is inside {inside[0]} ({inside[1]})"
    elif other is not None and folder == other:
        reason = f"is also {other_key}"
    elif other is not None and within(folder, other):
        reason = f"is inside {other_key} ({other})"
    else:
        return None
    return (f"{key}: {folder} {reason}, and runbook deletes and moves files in {key}, so it must be a folder "
            f"of this run's own (e.g. {example})")


def run_folder_problems(path: Path, tree: object, loaded: LoadedConfig) -> list[str]:
    real = lambda p: Path(os.path.realpath(p))  # noqa: E731 - symlinks and `..` resolved alike
    system = {real(p) for p in SYSTEM_FOLDERS} | {Path(p) for p in SYSTEM_FOLDERS} | {real(tempfile.gettempdir())}
    # Data folders as resolved and as written: a linked-in data folder is protected under both names.
    data = [(f"data.{n}", real(loaded.data_path(n))) for n in ("train_dir", "val_dir", "tokenizer_dir")]
    data += [(f"data.{n}", Path(os.path.normpath(loaded.project_dir / getattr(loaded.config.data, n))))
             for n in ("train_dir", "val_dir", "tokenizer_dir")]
    folders = {"out_dir": real(loaded.out_dir), "run_dir": real(loaded.run_dir)}
    args = (real(path), real(loaded.project_dir), data, real(Path.home()), system)
    # Each folder on its own first, then the pair: one sentence, about the folder that is wrong.
    pairs = (("out_dir", "run_dir"), ("run_dir", "out_dir"))
    checks: list[tuple[str, str, Path | None]] = [(k, o, None) for k, o in pairs]
    checks += [(k, o, folders[o]) for k, o in pairs]
    problems = []
    for key, other_key, other in checks:
        example = type(loaded.config).model_fields[key].default
        if problem := run_folder_problem(key, folders[key], other_key, other, *args, example):
            where = locate(tree, (key,))
            problems.append(f"{path}:{where[0]}:{where[1]}: {problem}" if where else f"{path}: {problem}")
            break
    return problems


MAX_RUN_LOG_TEMPLATE_BYTES = 256 * 1024   # engine/records/run_log.py reads at most this


def file_problems(path: Path, tree: object, loaded: LoadedConfig) -> list[str]:
    """run_log, run_log_template and watch.quarantine_dir get out_dir's protections (issue 26 item 6):
    the run log is appended to, so it may not be another file runbook or the trainer owns, nor a
    FIFO or device; quarantine_dir receives moved checkpoints, so it may not be a system, project,
    configs or data folder, nor lie inside out_dir. One sentence each, with file:line."""
    real = lambda p: Path(os.path.realpath(p))  # noqa: E731
    within = lambda a, b: a == b or b in a.parents  # noqa: E731
    out_dir, project = real(loaded.out_dir), real(loaded.project_dir)
    data = [(f"data.{n}", real(loaded.data_path(n))) for n in ("train_dir", "val_dir", "tokenizer_dir")]
    problems: list[tuple[tuple, str]] = []

    def kind_of(p: Path) -> str | None:
        try:
            mode = os.stat(p).st_mode
        except FileNotFoundError:
            return None   # not there yet: made on first use
        except OSError as error:   # a name too long, a file where a folder should be, no permission
            return f"unusable ({error.strerror})"
        return None if stat_mode.S_ISREG(mode) else "a folder" if stat_mode.S_ISDIR(mode) else "not a regular file (a FIFO or device)"

    log = real(loaded.run_log)
    reason = ("is the run config" if log == real(path) else
              "is the run's journal" if log == real(RunFolder(loaded.run_dir).journal) else
              f"is inside out_dir ({out_dir}), where checkpoints live" if within(log, out_dir) else
              next((f"is inside {n} ({d})" for n, d in data if within(log, d)), None) or
              ("is a checkpoint or training file" if log.suffix in (".pth", ".ckpt", ".safetensors") else None) or
              (f"is {k}" if (k := kind_of(log)) else None))
    if reason:
        problems.append((("run_log",), f"run_log: {log} {reason}; it must be a Markdown file of its own "
                                       f"(e.g. {type(loaded.config).model_fields['run_log'].default})"))
    if loaded.config.run_log_template is not None:
        template = real(loaded.resolve(loaded.config.run_log_template))
        k = kind_of(template)
        if k is None and not os.path.lexists(template):
            k = "missing"
        elif k is None and (size := os.stat(template).st_size) > MAX_RUN_LOG_TEMPLATE_BYTES:
            k = f"{size:,} bytes, more than {MAX_RUN_LOG_TEMPLATE_BYTES:,}"
        if k:
            problems.append((("run_log_template",), f"run_log_template: {template} is {k}; it must be a regular "
                                                    "text file (a Jinja2 template)"))
    if loaded.config.watch.quarantine_dir is not None:
        q = real(loaded.quarantine_dir)
        system = {real(p) for p in SYSTEM_FOLDERS} | {Path(p) for p in SYSTEM_FOLDERS}
        reason = ("is a system folder" if q in system or q == real(Path.home()) else
                  "is the project folder" if q == project else
                  f"is or holds the configs folder ({real(path).parent})" if within(real(path).parent, q) else
                  next((f"is, holds or lies inside {n} ({d})" for n, d in data if within(q, d) or within(d, q)), None) or
                  (f"is inside out_dir ({out_dir}), which runbook lists and prunes" if within(q, out_dir) else None) or
                  (f"holds out_dir ({out_dir})" if within(out_dir, q) else None) or
                  (k if (k := kind_of(q)) and k.startswith("unusable") else None))
        if reason:
            problems.append((("watch", "quarantine_dir"), f"watch.quarantine_dir: {q} {reason}; quarantined "
                                                          "checkpoints are moved there (default: <run_dir>/quarantine)"))
    out = []
    for loc, problem in problems:
        where = locate(tree, loc)
        out.append(f"{path}:{where[0]}:{where[1]}: {problem}" if where else f"{path}: {problem}")
    return out
