"""The trainer's parent: starts it, waits for it, and writes how it ended to a status file.

Only a process's parent can learn its exit code or signal. The watcher may be killed and started
again while the trainer runs on (a re-attached trainer is no longer its child), so the watcher does
not parent the trainer itself: this small launcher does, and outlives any watcher. The status file
is written atomically twice: at start ({"trainer_pid": ...}), then with "exit_code" (Popen's
convention: negative for a signal) and "signal" once the trainer is reaped.

Signals are for the trainer's own pid (run_dir/trainer.pid); the launcher only notes one that
reaches it (a whole process group signalled, say) and keeps waiting, so the exit is still recorded.

The status file also keeps the trainer's stop signals (`--notice-signal SIG`: it saves and exits;
`--quit-signal SIG`: it ends without a save), so a watcher that re-attaches stops it the same way.
When STATUS.redirect exists at the end (a warm spare became a launch), the final status is written
to the path it names as well.

The launcher is its launch's subreaper (PR_SET_CHILD_SUBREAPER): whatever the trainer starts and leaves
behind (torchrun's workers when torchrun itself is stopped or killed, a `setsid` child, a daemon) is
reparented to it rather than to init. Once the trainer has ended, every such leftover is killed and reaped
before the exit is recorded, so a launch is over only when all of it is: the next launch never trains
beside a remnant of this one.

Standard library only, run by path (`python .../launcher.py STATUS [--notice-signal SIG]
[--quit-signal SIG] -- ARGV...`): it starts in milliseconds and needs nothing of runbook importable
in the trainer's environment.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from types import FrameType

NOTED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
NO_SUCH_PROGRAM = 127


def write_status(path: str, status: dict) -> bool:
    """Temp file + fsync + rename: a reader sees the previous status or this one, never a mix.

    A full disk must not kill the launcher (the trainer would lose its parent, and the exit with it):
    it says so and goes on; the watcher that launched it learns the exit from its exit code."""
    tmp = f"{path}.{os.getpid()}.part"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(status, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as error:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        try:   # the log is likely on the same full disk
            print(f"runbook launcher: could not write {path}: {error.strerror or error}", file=sys.stderr, flush=True)
        except OSError:
            pass
        return False
    return True


def signal_name(code: int) -> str | None:
    try:
        return signal.Signals(-code).name if code < 0 else None
    except ValueError:
        return None


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (same reading as engine/process/identity.py; this file imports no runbook)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
        return int(text[text.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


PR_SET_CHILD_SUBREAPER = 36
LEFTOVER_WAIT_S = 5.0   # SIGKILLed leftovers are reaped within this (a process in uninterruptible I/O may take longer)
LEFTOVER_GRACE_S = 2.0  # a rank or helper still ending on its own (its exit record) is left this long first


def become_subreaper() -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children_of(pid: int) -> list[int]:
    """Processes whose parent is `pid` (/proc/PID/stat's 4th field)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                text = fh.read()
            if int(text[text.rindex(")") + 2:].split()[1]) == pid:
                found.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _reap() -> None:
    """Reap every child that has died (a leftover's own children are reparented here meanwhile)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_leftovers(wait_s: float = LEFTOVER_WAIT_S, grace_s: float = LEFTOVER_GRACE_S) -> list[int]:
    """SIGKILL and reap every process reparented to this launcher (the trainer has ended; these are what it left:
    their own children come to us in turn as they die), after grace_s for them to end on their own: a rank that
    saved on the same notice is still writing its exit record a moment after rank 0 ended. Returns the pids
    ended by the SIGKILL."""
    grace = time.monotonic() + grace_s
    while children_of(os.getpid()) and time.monotonic() < grace:
        _reap()
        time.sleep(0.02)
    ended: list[int] = []
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        left = children_of(os.getpid())
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            if pid not in ended:
                ended.append(pid)
        _reap()
        time.sleep(0.02)
    return ended


STOP_SIGNAL_OPTIONS = {"--notice-signal": "notice_signal", "--quit-signal": "quit_signal"}


def parse_args(argv: list[str]) -> tuple[str, dict, list[str]] | None:
    """PURE. (status file, stop signals, command) or None for a bad command line."""
    if "--" not in argv or argv.index("--") < 1 or argv.index("--") == len(argv) - 1:
        return None
    cut = argv.index("--")
    status_path, options, command = argv[0], argv[1:cut], argv[cut + 1:]
    if len(options) % 2:
        return None
    signals = {}
    for option, value in zip(options[::2], options[1::2]):
        if option not in STOP_SIGNAL_OPTIONS or value not in signal.Signals.__members__:
            return None
        signals[STOP_SIGNAL_OPTIONS[option]] = value
    return status_path, signals, command


def main(argv: list[str]) -> int:
    parsed = parse_args(argv)
    if parsed is None:
        print("usage: launcher.py STATUS_FILE [--notice-signal SIG] [--quit-signal SIG] -- PROGRAM [ARG...]", file=sys.stderr)
        return 2
    status_path, stop_signals, command = parsed
    status: dict = {"launcher_pid": os.getpid(), "started": time.time(), "signals_to_launcher": [], **stop_signals}

    def note(signum: int, _frame: FrameType | None) -> None:  # a Python handler, not SIG_IGN: the trainer gets default dispositions on exec
        status["signals_to_launcher"].append(signal.Signals(signum).name)

    for sig in NOTED_SIGNALS:
        signal.signal(sig, note)
    subreaper = become_subreaper()
    try:
        child = subprocess.Popen(command)   # inherits cwd, env, the log file as stdout/stderr, rlimits
    except OSError as err:
        status.update(trainer_pid=None, exit_code=NO_SUCH_PROGRAM, signal=None, ended=time.time(),
                      error=f"could not start {command[0]!r}: {err.strerror or err}")
        print(f"runbook launcher: {status['error']}", file=sys.stderr, flush=True)
        write_status(status_path, status)
        return NO_SUCH_PROGRAM
    # Identity for a later watcher (engine/process/identity.py): the kernel's exact start time and the boot.
    status.update(trainer_pid=child.pid, trainer_start_ticks=start_ticks(child.pid), boot_id=boot_id())
    write_status(status_path, status)
    code = child.wait()   # PEP 475: a handled signal does not interrupt the wait
    ended = time.time()
    leftovers = end_leftovers() if subreaper else []
    if leftovers:
        print(f"runbook launcher: the trainer ended (exit {code}) leaving {len(leftovers)} process(es) of its launch "
              f"running; killed: {', '.join(map(str, leftovers))}", file=sys.stderr, flush=True)
    status.update(exit_code=code, signal=signal_name(code), ended=ended, leftovers_killed=leftovers)
    write_status(status_path, status)
    try:   # a warm spare (engine/process/warm_spare.py) that became a launch: that launch's status file too
        with open(status_path + ".redirect", encoding="utf-8") as fh:
            write_status(fh.read().strip(), status)
    except OSError:
        pass
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
