"""Run a command under hard bounds: memory, wall time, and the processes it leaves behind.

`subprocess.run(capture_output=True, timeout=...)` holds all output in memory (`yes` for 6 s: 4.5 GB),
waits past its timeout for a backgrounded child that still holds the pipe, and leaves that child
running. Here the command starts in a session (and process group) of its own, so everything it starts
is ours to stop; its output (stdout and stderr, merged) is read in chunks of CHUNK bytes and only the
first and last `keep_bytes / 2` are kept; at the deadline the whole group gets SIGTERM, then SIGKILL
after `kill_grace_s`; and when the command itself exits while processes of its group still run (or
hold the pipe), they are killed the same way, not waited for, and the result says so.

A process that leaves the group (setsid) is out of reach: it is not waited for either.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

CHUNK = 64 * 1024
KEEP_BYTES = 64 * 1024
READS_PER_TURN = 16        # then look at the clock again: a flood never starves the deadline
POLL_S = 0.05


@dataclass(frozen=True)
class CommandResult:
    returncode: int | None      # negative: killed by that signal
    output: str                 # the kept output, decoded with errors="replace"
    output_bytes: int           # every byte the command wrote
    kept_bytes: int
    timed_out: bool
    seconds: float
    killed_left_behind: int     # processes of its group still running after it exited, killed by us

    @property
    def truncated(self) -> bool:
        return self.kept_bytes < self.output_bytes


class HeadTail:
    """The first and last `limit / 2` bytes of a stream, whatever its length."""

    def __init__(self, limit: int):
        self.half = max(1, limit // 2)
        self.head, self.tail, self.total = bytearray(), bytearray(), 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk[-self.half:]
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    @property
    def kept(self) -> int:
        return len(self.head) + len(self.tail)

    def text(self) -> str:
        head, tail = self.head.decode("utf-8", "replace"), self.tail.decode("utf-8", "replace")
        if self.kept == self.total:
            return head + tail
        return f"{head}\n[... {self.total - self.kept:,} bytes left out ...]\n{tail}"


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group `pgid`, from /proc; where /proc is missing, [pgid]
    if signal 0 reaches the group."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except (ProcessLookupError, PermissionError):
            return []
    members = []
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()   # after "(comm)": state ppid pgrp ...
        if len(fields) > 2 and fields[0] not in ("Z", "X") and fields[2] == str(pgid):
            members.append(int(entry.name))
    return members


def kill_group(pgid: int, grace_s: float) -> int:
    """SIGTERM the group, then SIGKILL what is left after grace_s; the number of live members found."""
    found = len(group_members(pgid))
    if not found:
        return 0
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return found
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not group_members(pgid):
                return found
            time.sleep(0.01)
    return found


def _read_some(fd: int, kept: HeadTail) -> bool:
    """Read what is there (at most READS_PER_TURN chunks); True at end of file."""
    for _ in range(READS_PER_TURN):
        try:
            chunk = os.read(fd, CHUNK)
        except BlockingIOError:
            return False
        if not chunk:
            return True
        kept.add(chunk)
    return False


def run_bounded(argv: list[str], timeout_s: float, cwd: str | Path | None = None, env: dict[str, str] | None = None,
                keep_bytes: int = KEEP_BYTES, kill_grace_s: float = 0.3) -> CommandResult:
    """Run argv (no shell) to its end or its deadline; OSError when it cannot start."""
    started = time.monotonic()
    deadline = started + timeout_s
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    kept, timed_out, eof, left_behind = HeadTail(keep_bytes), False, False, 0
    out = proc.stdout
    assert out is not None                   # stdout=PIPE
    fd = out.fileno()
    os.set_blocking(fd, False)
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while proc.poll() is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                if eof:                      # it closed its output but runs on
                    time.sleep(min(left, POLL_S))
                elif selector.select(min(left, POLL_S)):
                    eof = _read_some(fd, kept)
        if not eof:
            eof = _read_some(fd, kept)       # what it wrote just before it exited; never wait for more
    finally:
        # Ours to stop: the command's own session, also when the caller is interrupted (KeyboardInterrupt).
        # At the deadline that includes the command itself.
        left_behind = kill_group(proc.pid, kill_grace_s)
        try:
            proc.wait(timeout=max(kill_grace_s * 2, 1.0))
        except subprocess.TimeoutExpired:   # in uninterruptible sleep even after SIGKILL: not waited for
            pass
        out.close()
    return CommandResult(returncode=proc.returncode, output=kept.text(), output_bytes=kept.total, kept_bytes=kept.kept,
                         timed_out=timed_out, seconds=round(time.monotonic() - started, 3),
                         killed_left_behind=0 if timed_out else left_behind)


__all__ = ["CHUNK", "KEEP_BYTES", "CommandResult", "HeadTail", "group_members", "kill_group", "run_bounded"]
