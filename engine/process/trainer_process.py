"""The trainer as an OS process: start it, watch it, stop it (also when it is SIGSTOPped)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from engine.core.bounded_read import read_json_record
from engine.core.exit_codes import signal_from_code
from engine.process import warm_spare
from engine.process.identity import Identity, Proof, ProvenProcess, start_ticks
from engine.process.launch_spec import LAUNCHER, LaunchSpec  # noqa: F401 - LAUNCHER: importable here too


def signal_name(exit_code: int | None) -> str | None:
    """-15 (Popen), 143 (shell) or 241 (sys.exit(-15)) -> 'SIGTERM' (engine/core/exit_codes.py)."""
    return signal_from_code(exit_code)


def exit_from_launcher(returncode: int) -> dict | None:
    """The trainer's exit from its launcher's own exit code (the launcher mirrors it: 128+N for signal N),
    for when a full disk kept the launcher from writing its status file. None when the launcher itself
    was killed: then the trainer's exit is not known."""
    if returncode < 0:
        return None
    code = -(returncode - 128) if returncode > 128 and signal_name(-(returncode - 128)) else returncode
    return {"exit_code": code, "signal": signal_name(code), "from": "the launcher's exit code"}


LAUNCHER_START_TIMEOUT_S = 30.0
LAUNCHER_WRITE_WAIT_S = 2.0   # a launcher records its trainer's exit within this of the trainer's end


def read_exit_status(path: Path | None) -> dict:
    """The launcher's status file ({} when missing or unreadable: the exit is then unknown)."""
    if path is None:
        return {}
    try:
        status = read_json_record(path)   # bounded: a 100,000-deep file is unreadable, not a RecursionError
    except (OSError, ValueError):   # SourceError is a ValueError
        return {}
    return status if isinstance(status, dict) else {}


class TrainerProcess:
    """A launched trainer. Output goes to a log file (not a pipe) and its exit to a status file written
    by its launcher parent (engine/process/launcher.py), so a restarted watcher can re-attach and still learn
    how it ended."""

    def __init__(self, pid: int, log_path: Path, status_path: Path | None = None,
                 launcher: subprocess.Popen | None = None, started_at: float | None = None,
                 notice_signal: str | None = None, quit_signal: str = "SIGTERM",
                 handle: ProvenProcess | None = None):
        self.pid = pid
        self._handle = handle                # None: not proven ours, so never signalled
        self.proof: Proof | None = None      # set by attach(): why it is (or is not) this run's trainer
        self.log_path = log_path
        self.status_path = status_path
        self._launcher = launcher            # set only for the watcher that launched it (to reap it)
        self.started_at = started_at or time.time()
        self._exit: dict | None = None       # the launcher's final status, once read
        self._gone = False
        self._gone_at: float | None = None   # when the trainer was first seen gone (its exit then follows)
        self.notice_signal = notice_signal   # the trainer saves a checkpoint and exits on it (None: cannot)
        self.quit_signal = quit_signal       # it ends without a save (a recovery's stop)

    @classmethod
    def launch(cls, spec: LaunchSpec, log_path: Path, status_path: Path,
               spares: warm_spare.SparePool | None = None) -> "TrainerProcess":
        """Start the trainer under its launcher, or hand the launch to `spares`' waiting spare when it matches."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        status_path.parent.mkdir(parents=True, exist_ok=True)
        status_path.unlink(missing_ok=True)
        limit_memory = warm_spare.memory_limiter(spec.memory_limit_bytes)   # RLIMIT_AS, inherited by the trainer
        signals = ["--quit-signal", spec.quit_signal] + (["--notice-signal", spec.notice_signal] if spec.notice_signal else [])
        argv = [sys.executable, str(LAUNCHER), str(status_path), *signals, "--", *spec.argv]
        taken = spares.take(spec, log_path, status_path) if spares is not None else None
        if taken is not None:
            pid, launcher = taken
        else:
            with open(log_path, "ab") as log:
                # Own session: a Ctrl-C in the watcher's terminal is not delivered to the trainer directly;
                # the watcher forwards it deliberately and records what happened.
                launcher = subprocess.Popen(
                    argv, cwd=spec.cwd, env=spec.env, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=limit_memory,
                )
            status = cls._wait_for_start(launcher, status_path)
            pid = status.get("trainer_pid") or launcher.pid
        if spares is not None:
            spares.start_next(spec, LAUNCHER, log_path)   # the next launch's (engine/process/warm_spare.py)
        try:
            started = psutil.Process(pid).create_time()
        except psutil.Error:
            started = None
        # Our own launcher just reported this pid: the handle pins the process it names now.
        ticks = read_exit_status(status_path).get("trainer_start_ticks") or start_ticks(pid)
        return cls(pid, log_path, status_path, launcher, started, spec.notice_signal, spec.quit_signal,
                   ProvenProcess(pid, ticks))

    @staticmethod
    def _wait_for_start(launcher: subprocess.Popen, status_path: Path) -> dict:
        deadline = time.monotonic() + LAUNCHER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            status = read_exit_status(status_path)
            if "trainer_pid" in status:
                return status
            if launcher.poll() is not None:
                return read_exit_status(status_path)
            time.sleep(0.005)
        return {}

    @classmethod
    def attach(cls, pid: int, log_path: Path, started_at: float | None = None,
               status_path: Path | None = None) -> "TrainerProcess":
        """The trainer an earlier watcher launched, alive or not.

        Only a proven identity is attached (engine/process/identity.py): pid, start time and the
        launcher's own record must agree. Anything else is treated as gone and is never signalled;
        `proof` says why, and whether some process runs under that pid all the same. A trainer that
        is gone is returned too, with the exit its launcher recorded (or none, when that is unknown)."""
        recorded = read_exit_status(status_path)   # the stop signals its launcher kept
        proof = Identity(pid, started_at, recorded).proof()
        handle = ProvenProcess(pid, recorded.get("trainer_start_ticks") or start_ticks(pid)) if proof.ours else None
        process = cls(pid, log_path, status_path, None, started_at if isinstance(started_at, (int, float)) else None,
                      recorded.get("notice_signal"), recorded.get("quit_signal") or "SIGTERM", handle)
        process.proof = proof
        process._gone = not proof.ours
        if proof.alive and not proof.ours:   # someone else's process: nothing of ours is ending there
            process._gone_at = float("-inf")
        return process

    def poll(self) -> int | None:
        """The exit code once the process ended (None while alive, or when it cannot be known)."""
        status = self._final_status()
        return status.get("exit_code") if status else None

    @property
    def exit_known(self) -> bool:
        return self._final_status() is not None

    def _final_status(self) -> dict | None:
        if self._exit is None:
            status = read_exit_status(self.status_path)
            if "exit_code" in status and isinstance(status["exit_code"], int):
                self._exit = status
            elif self._launcher is not None and self._launcher.poll() is not None:
                self._exit = exit_from_launcher(self._launcher.returncode)
        return self._exit

    @property
    def alive(self) -> bool:
        """Until its exit is recorded, and never blocking: a trainer gone a moment ago whose launcher is
        still writing its exit stays alive for at most LAUNCHER_WRITE_WAIT_S, with `exit_pending` set
        (the watch loop decides nothing on such an observation: the exit follows within the next ticks)."""
        if self._launcher is not None:
            self._launcher.poll()   # reap the launcher once it is done (no zombie left behind)
        if self._final_status() is not None:
            return False
        return not self._seen_gone() or self.exit_pending

    def _seen_gone(self) -> bool:
        if not self._gone:
            self._gone = not self._same_process_running()
        return self._gone

    @property
    def exit_pending(self) -> bool:
        """The trainer is gone and its launcher, still running, has not yet recorded the exit (bounded by
        LAUNCHER_WRITE_WAIT_S from when the trainer was first seen gone)."""
        if self._final_status() is not None or not self._seen_gone():
            return False
        if self._gone_at is None:
            self._gone_at = time.monotonic()
        if time.monotonic() - self._gone_at >= LAUNCHER_WRITE_WAIT_S:
            return False
        launcher_pid = read_exit_status(self.status_path).get("launcher_pid")
        if not isinstance(launcher_pid, int):
            return False
        try:
            writing = psutil.Process(launcher_pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            writing = False
        if not writing and self._launcher is not None:
            self._launcher.poll()
        return writing and self._final_status() is None

    def _same_process_running(self) -> bool:
        """The pid still names the process we launched or proved (not a zombie, not a reused pid)."""
        try:
            if psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE:
                return False
        except psutil.Error:
            return False
        ticks = self._handle.ticks if self._handle is not None else None
        return ticks is None or ticks == start_ticks(self.pid)

    @property
    def stopped(self) -> bool:
        if self._gone:
            return False
        try:
            return psutil.Process(self.pid).status() == psutil.STATUS_STOPPED
        except psutil.Error:
            return False

    def send(self, sig: int) -> bool:
        """Only to the proven process (a pidfd where available); False when it is gone or unproven."""
        return self._handle is not None and self._handle.send(sig)

    def wait_exit(self, timeout_s: float) -> bool:
        """True once the trainer has ended, False when it still runs after timeout_s."""
        deadline = time.monotonic() + timeout_s
        while self.alive:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def give_notice(self, grace_s: float) -> str | None:
        """The notice signal (save, then exit), and up to grace_s for the save; None when the trainer
        takes no notice. It is not killed here: stop() follows if it is still running."""
        if self.notice_signal is None or not self.alive:
            return None
        started = time.monotonic()
        self.send(signal.SIGCONT)   # a stopped process cannot act on a signal
        self.send(signal.Signals[self.notice_signal])
        if self.wait_exit(grace_s):
            return (f"trainer pid {self.pid} took the {self.notice_signal} notice and exited {self.poll()} "
                    f"after {time.monotonic() - started:.1f} s")
        return f"trainer pid {self.pid} did not finish its notice save within {grace_s:g} s"

    def stop(self, grace_s: float) -> str:
        """SIGCONT (a stopped process cannot act on a signal), the quit signal (SIGTERM, or SIGUSR2 where
        SIGTERM is a notice: a stop without a save), then SIGKILL after the grace period."""
        if not self.alive:   # it ended on its own first (a crash a moment before the stop): say how, for the record
            code = self.poll()
            return "trainer was not running" + (f" (it had exited {code})" if code is not None else "")
        self.send(signal.SIGCONT)
        self.send(signal.Signals[self.quit_signal])
        if self.wait_exit(grace_s):
            return f"trainer pid {self.pid} stopped with {self.quit_signal}"
        self.send(signal.SIGKILL)
        self.wait_exit(10.0)
        return f"trainer pid {self.pid} killed with SIGKILL after {grace_s:g} s"
