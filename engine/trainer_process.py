"""The trainer as an OS process: start it, watch it, stop it (also when it is SIGSTOPped)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from engine.trainers.base import LaunchSpec


def signal_name(exit_code: int | None) -> str | None:
    """-15 (Popen) or 143 (shell) -> 'SIGTERM'."""
    if exit_code is None:
        return None
    number = -exit_code if exit_code < 0 else exit_code - 128 if exit_code > 128 else None
    if number is None:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


class TrainerProcess:
    """A launched trainer. Output goes to a log file (not a pipe), so a restarted watcher can re-attach."""

    def __init__(self, pid: int, log_path: Path, popen: subprocess.Popen | None = None, started_at: float | None = None):
        self.pid = pid
        self.log_path = log_path
        self._popen = popen
        self.started_at = started_at or time.time()
        self._exit_code: int | None = None
        self._gone = False

    @classmethod
    def launch(cls, spec: LaunchSpec, log_path: Path) -> "TrainerProcess":
        log_path.parent.mkdir(parents=True, exist_ok=True)
        limit = spec.memory_limit_bytes

        def limit_memory() -> None:  # runs in the child between fork and exec
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        with open(log_path, "ab") as log:
            # Own session: a Ctrl-C in the watcher's terminal is not delivered to the trainer directly;
            # the watcher forwards it deliberately and records what happened.
            popen = subprocess.Popen(
                spec.argv, cwd=spec.cwd, env=spec.env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=limit_memory if limit else None,
            )
        try:
            started = psutil.Process(popen.pid).create_time()
        except psutil.Error:
            started = None
        return cls(popen.pid, log_path, popen, started)

    @classmethod
    def attach(cls, pid: int, log_path: Path, started_at: float | None = None) -> "TrainerProcess | None":
        """Re-attach to a trainer started by an earlier watcher, if it is still alive.

        A pid alone is not enough (after a reboot or on another node it may be someone else's
        process): its start time must match the one recorded at launch."""
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            if started_at is not None and abs(proc.create_time() - started_at) > 1.0:
                return None
            return cls(pid, log_path, None, proc.create_time())
        except psutil.Error:
            return None

    def poll(self) -> int | None:
        """The exit code once the process ended (None while alive, or when unknown after re-attach)."""
        if self._popen is not None:
            if self._exit_code is None:
                self._exit_code = self._popen.poll()
            return self._exit_code
        return None

    @property
    def alive(self) -> bool:
        if self._popen is not None:
            return self.poll() is None
        if self._gone:
            return False
        try:
            alive = psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            alive = False
        self._gone = not alive
        return alive

    @property
    def stopped(self) -> bool:
        try:
            return psutil.Process(self.pid).status() == psutil.STATUS_STOPPED
        except psutil.Error:
            return False

    def send(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, grace_s: float) -> str:
        """SIGCONT (a stopped process cannot act on SIGTERM), SIGTERM, then SIGKILL after the grace period."""
        if not self.alive:
            return "trainer was not running"
        self.send(signal.SIGCONT)
        self.send(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not self.alive:
                return f"trainer pid {self.pid} stopped with SIGTERM"
            time.sleep(0.05)
        self.send(signal.SIGKILL)
        for _ in range(200):
            if not self.alive:
                break
            time.sleep(0.05)
        return f"trainer pid {self.pid} killed with SIGKILL after {grace_s:g} s"
