"""Whether a pid is this run's trainer, proven, and signals that can only reach that process.

A pid alone proves nothing: after a reboot, a crash of the watcher or a hand-edited journal it may
name someone else's process. A trainer is this run's only when three records agree with the live
process:

- the journal's launch line: pid and the process's start time (`started`);
- the launcher's own status file in this run folder (engine/process/launcher.py): the same `trainer_pid`,
  and, written by launchers since this module, the kernel's start time in clock ticks and the boot id
  (exact, where `started` is a float rounded by psutil);
- the process itself: alive, not a zombie, its start time the recorded one.

A record that cannot prove identity (no `started`, no launcher record, a different pid there) is never
trusted to signal. Once proven, a pidfd is opened and re-checked, so a later signal goes to that very
process even if the pid is reused meanwhile (Linux >= 5.3; elsewhere each signal re-checks the start
time just before it is sent).
"""

from __future__ import annotations

import math
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import psutil

from engine.core.bounded_read import read_json_record

START_TIME_TOLERANCE_S = 1.0   # psutil's create_time is computed from ticks and boot time: not exact


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22); exact and unique
    per pid within one boot. None where /proc is not readable or the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        fields = text[text.rindex(")") + 2:].split()
        return int(fields[19])   # field 22 overall; fields[0] is field 3 (state)
    except (OSError, ValueError, IndexError):
        return None


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip() or None
    except OSError:
        return None


@dataclass(frozen=True)
class Identity:
    """What the records say a trainer is. `proof()` checks them against the live process."""
    pid: object                   # as read from a record: may be anything until checked
    started: object = None        # the journal's create time
    launcher_record: dict | None = None   # the launcher's status file, parsed

    def proof(self) -> "Proof":
        """PURE apart from reading /proc. Why the pid is (or is not) provably this run's trainer."""
        pid, started, record = self.pid, self.started, self.launcher_record
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1 or pid == os.getpid():
            return Proof(False, f"the record names no usable pid ({pid!r})", alive=False)
        if not isinstance(started, (int, float)) or isinstance(started, bool) or not math.isfinite(started):
            return Proof(False, f"the launch record of pid {pid} has no start time, so it cannot prove the "
                                "process is this run's", alive=_exists(pid))
        if not isinstance(record, dict) or not record:
            return Proof(False, f"no launcher record in this run folder names pid {pid}", alive=_exists(pid))
        if record.get("trainer_pid") != pid:
            return Proof(False, f"the launcher's record names pid {record.get('trainer_pid')!r}, not {pid}",
                         alive=_exists(pid))
        try:
            process = psutil.Process(pid)
            created, status = process.create_time(), process.status()
        except psutil.Error:
            return Proof(False, f"pid {pid} is gone", alive=False)
        if status == psutil.STATUS_ZOMBIE:
            return Proof(False, f"pid {pid} has exited (a zombie)", alive=False)
        if abs(created - started) > START_TIME_TOLERANCE_S:
            return Proof(False, f"pid {pid} started at {created:.2f}, not at the recorded {started:.2f}: "
                                "another process now has that pid", alive=True)
        ticks, boot = record.get("trainer_start_ticks"), record.get("boot_id")
        if ticks is not None and ticks != start_ticks(pid):
            return Proof(False, f"pid {pid}'s kernel start time differs from its launcher's record", alive=True)
        if boot is not None and boot != boot_id():
            return Proof(False, f"pid {pid} was recorded before a reboot", alive=True)
        return Proof(True, f"pid {pid}: start time and launcher record agree", alive=True)


@dataclass(frozen=True)
class Proof:
    ours: bool
    reason: str
    alive: bool    # the pid runs, ours or not (a process we must not touch but also must not launch beside)


def _exists(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class ProvenProcess:
    """A handle that signals only the process proven at creation: through a pidfd where the kernel has
    them, else after re-checking the exact start time. `send` returns False when the process is gone or
    is no longer the same one; it never reaches another."""

    def __init__(self, pid: int, ticks: int | None):
        self.pid = pid
        self.ticks = ticks
        self._fd: int | None = None
        if hasattr(os, "pidfd_open"):
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                fd = None
            if fd is not None and ticks is not None and start_ticks(pid) != ticks:
                os.close(fd)     # the pid was reused between the proof and the open
                fd = None
                self.ticks = -1  # nothing may be sent
            self._fd = fd

    @classmethod
    def of(cls, pid: int) -> "ProvenProcess":
        return cls(pid, start_ticks(pid))

    def send(self, sig: int) -> bool:
        if self.ticks == -1:
            return False
        if self._fd is not None:
            try:
                signal.pidfd_send_signal(self._fd, sig)
                return True
            except ProcessLookupError:
                return False
            except OSError:
                pass   # fall back to the start-time check
        if self.ticks is None or start_ticks(self.pid) != self.ticks:
            return False
        try:
            os.kill(self.pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def __del__(self) -> None:   # a handle left to the garbage collector still frees its fd
        self.close()


def live_launchers_of(run_dir: Path) -> list[tuple[int, Path]]:
    """Every live runbook launcher (engine/process/launcher.py) whose status file lies in this run folder:
    (launcher pid, status path). Found from the process table, not from any record, so a trainer the
    journal lost track of is still found. Warm spares not adopted by a launch are not trainers."""
    root = os.path.realpath(run_dir)
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        argv = proc.info.get("cmdline") or []
        launcher_at = next((i for i, arg in enumerate(argv[:3]) if arg.endswith("launcher.py")), None)
        if launcher_at is None or len(argv) <= launcher_at + 1 or proc.info["pid"] == os.getpid():
            continue
        status = Path(argv[launcher_at + 1])
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            real = os.path.realpath(status if status.is_absolute() else Path(proc.cwd()) / status)
        except (psutil.Error, OSError):
            continue
        if os.path.commonpath([root, real]) != root:
            continue
        adopted_spare = os.path.exists(real + ".redirect")
        if os.sep + "launches" + os.sep in real[len(root):] or adopted_spare:
            found.append((proc.info["pid"], Path(real)))
    return found


class SecondTrainerRefused(RuntimeError):
    """A trainer of this run folder is alive and is not the one this watcher controls: launching would
    put two trainers on one out_dir (both saving step-N, `last` pointing at either)."""


def live_trainers_of(run_dir: Path, except_pid: int | None = None) -> list[tuple[int, Path]]:
    """(trainer pid, launcher status file) of every trainer of this run folder still running,
    found from the live launchers (not from the journal): the launcher's own record names the trainer,
    and a trainer that has ended (its exit recorded, or its pid gone) is not counted."""
    live = []
    for _launcher_pid, status_path in live_launchers_of(run_dir):
        try:
            status = read_json_record(status_path)
        except (OSError, ValueError, RecursionError):
            status = {}
        pid = status.get("trainer_pid") if isinstance(status, dict) else None
        if not isinstance(pid, int) or pid == except_pid or "exit_code" in status:
            continue
        ticks = status.get("trainer_start_ticks")
        if _exists(pid) and (ticks is None or ticks == start_ticks(pid)):
            live.append((pid, status_path))
    return live
