"""The trainer side of engine/process/ranks.py's contract: this process's rank, its heartbeat and its exit,
written where the watcher asks (RUNBOOK_RANKS_DIR), from the environment any launcher sets.

Standard library only: it runs inside the user's training process, whose own folder comes first on
sys.path (a repository holding `engine.py` is common: DETR, MAE, DeiT, ConvNeXt), so nothing of the
engine, pydantic or psutil is imported here. The JSON is engine/process/ranks.py's RankHeartbeat and
RankExit, field for field (tests/unit/test_rank_records.py reads what this writes with the engine's models).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import sysconfig
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # annotations only: nothing more is imported into the user's process
    from collections.abc import Callable, Mapping
    from types import TracebackType

RANKS_DIR_ENV = "RUNBOOK_RANKS_DIR"       # engine/process/ranks.py's name for the same folder
MAX_ERROR_CHARS = 500                     # an exception's message can be megabytes (a tensor's repr)


@dataclass(frozen=True)
class RankIdentity:
    rank: int
    world_size: int
    local_rank: int


def identity_from(environ: Mapping[str, str]) -> RankIdentity:
    """PURE. torchrun, accelerate and deepspeed set RANK/WORLD_SIZE/LOCAL_RANK; srun sets SLURM_PROCID/
    SLURM_NTASKS/SLURM_LOCALID (used only when the launcher's names are absent: runbook may itself run
    inside a one-task SLURM job)."""
    def number(*names: str, default: int) -> int:
        for name in names:
            text = environ.get(name, "")
            if text.strip().isdigit():
                return int(text)
        return default

    launcher = "RANK" in environ or "WORLD_SIZE" in environ
    if launcher:
        return RankIdentity(number("RANK", default=0), max(1, number("WORLD_SIZE", default=1)),
                            number("LOCAL_RANK", default=0))
    return RankIdentity(number("SLURM_PROCID", default=0), max(1, number("SLURM_NTASKS", default=1)),
                        number("SLURM_LOCALID", default=0))


def process_start_time(pid: int | None = None) -> float:
    """The kernel's start time of a process as psutil's create_time() computes it (boot time + start ticks
    / clock ticks): the engine proves a heartbeat's pid by it, since pids are reused."""
    pid = os.getpid() if pid is None else pid
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
        ticks = int(text[text.rindex(")") + 2:].split()[19])
        with open("/proc/stat", encoding="ascii") as fh:
            boot = next(float(line.split()[1]) for line in fh if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots if r))


def user_frame(tb: TracebackType | None) -> str | None:
    """'train.py:57' when the innermost frame of a traceback is the user's own code (not the standard library's,
    not an installed package's, not runbook's); None when the error was raised inside library code (a CUDA
    error, a collective's lost peer), which may be the machine's rather than the script's."""
    frames = traceback.extract_tb(tb)
    if not frames:
        return None
    innermost = frames[-1]
    path = os.path.realpath(innermost.filename)
    here = os.path.dirname(os.path.realpath(__file__)) + os.sep
    if innermost.filename.startswith("<") or path.startswith(_library_roots()) or path.startswith(here):
        return None
    shown = os.path.relpath(path)
    return f"{path if shown.startswith('..') else shown}:{innermost.lineno}"


def error_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return text[:MAX_ERROR_CHARS]


class RankRecorder:
    """This process's records in the ranks folder; does nothing when the watcher asked for none."""

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        self.folder = environ.get(RANKS_DIR_ENV) or None
        self.me = identity_from(environ)
        self.pid = os.getpid()
        self.started = process_start_time()
        self.host = socket.gethostname()
        self.exit_written = False

    def heartbeat(self, step: int | None, phase: str = "work") -> None:
        self._write(f"rank-{self.me.rank}.json", {
            "rank": self.me.rank, "world_size": self.me.world_size, "pid": self.pid, "started": self.started,
            "step": step, "iter_num": step, "phase": phase, "time": time.time(), "host": self.host})

    def exit(self, code: int, error: str | None = None, where: str | None = None) -> None:
        if self.exit_written:
            return
        self.exit_written = True
        self._write(f"rank-{self.me.rank}.exit.json", {
            "rank": self.me.rank, "pid": self.pid, "exit_code": code, "ended": time.time(),
            "error": error, "where": where})

    def _write(self, name: str, record: dict) -> None:
        """Temp file + rename (a reader sees a whole record); a full disk must not stop training."""
        if not self.folder or os.getpid() != self.pid:   # a forked data worker is not this rank
            return
        try:
            os.makedirs(self.folder, exist_ok=True)
            path = os.path.join(self.folder, name)
            tmp = os.path.join(self.folder, f".{name}.{self.pid}.tmp")
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(record, fh)
            os.replace(tmp, path)
        except OSError:
            pass

    def install_exit_hooks(self, exit_code_on_clean_exit: Callable[[], int]) -> None:
        """An uncaught exception is recorded with its message and, when it was raised in the user's own code,
        the file:line (a restart cannot fix that); a clean interpreter exit with the code the caller says."""
        import atexit

        previous = sys.excepthook

        def on_exception(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
            previous(kind, value, tb)   # the traceback reaches the log before the record: the text decides too
            if not issubclass(kind, (SystemExit, KeyboardInterrupt)):
                sys.stderr.flush()
                self.exit(1, error_line(value), user_frame(tb))

        sys.excepthook = on_exception
        atexit.register(lambda: self.exit(exit_code_on_clean_exit()))
