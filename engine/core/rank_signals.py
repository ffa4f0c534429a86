"""Which processes of a trainer died of which signal, as every layer reports it (PURE, bounded).

The kind of a failure is in its signal, not in its wording: one rank's SIGSEGV may be a transient fault
worth one restart, but the same crash signal on every rank at once is the environment's (a /dev/shm too
small for NCCL inside a container, a driver that does not match, a config every rank reads), and a
restart meets it again. This reads the reports a dead group leaves:

- the ranks' own exit records (engine/process/ranks.py, in `state.trainer.ranks.ranks`);
- the launcher's summary: torchrun's `exitcode  : -7 (pid: 16615)` / `failed (exitcode: -7) local_rank: 0
  (pid: 5275)` / `Signal 7 (SIGBUS) received by PID 16615`, deepspeed's `exits with return code = -7`,
  srun's `task 3: Bus error` (a task range counts each task);
- torch.multiprocessing.spawn's `process 1 terminated with signal SIGBUS`;
- a crash handler's own line in each process: UCX's `[host:5283:0:5704] Caught signal 7 (Bus error: ...)`,
  Open MPI's `[host:5283] Signal: Bus error (7)`, faulthandler's `Fatal Python error: Bus error`.

A report that names a pid is counted once however many lines name it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from engine.core.exit_codes import normalise, signal_of

if TYPE_CHECKING:
    from engine.core.state import RankStatus

MAX_LINE = 4096
MAX_REPORTS = 4096
# Crash signals: the process was broken, not asked to stop (SIGTERM/SIGINT/SIGHUP) nor killed from outside (SIGKILL).
CRASH_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGFPE")

_TORCHRUN_EXIT = re.compile(r"exitcode\s{0,8}:\s{0,8}(-?\d{1,3})\b[^\n]{0,40}?\(pid:\s{0,4}(\d{1,10})\)")
_TORCHRUN_FAILED = re.compile(r"failed \(exitcode: (-?\d{1,3})\) local_rank: \d{1,6} \(pid: (\d{1,10})\)")
_RECEIVED = re.compile(r"[Ss]ignal (\d{1,2}) \((SIG[A-Z0-9]{2,8})\) received by PID (\d{1,10})")
_DEEPSPEED = re.compile(r"exits with return code = (-?\d{1,3})\b")
_SRUN = re.compile(r"srun: error: \S{1,200}: tasks? ([\d,-]{1,100}): (Segmentation fault|Bus error|Aborted|Killed|Terminated)")
_CAUGHT = re.compile(r"(?:\[[^\]:]{0,200}:(\d{1,10}) ?:[^\]]{0,40}\] )?Caught signal (\d{1,2}) \(")
_SPAWN = re.compile(r"process (\d{1,6}) terminated with signal (SIG[A-Z0-9]{2,8})")
_OPEN_MPI = re.compile(r"\[[^\]:]{0,200}:(\d{1,10})\] Signal: [A-Za-z ]{1,40} \((\d{1,2})\)")
_FAULTHANDLER = re.compile(r"Fatal Python error: (Segmentation fault|Bus error|Aborted|Floating point exception|Illegal instruction)")
_NAMES = {"Segmentation fault": "SIGSEGV", "Bus error": "SIGBUS", "Aborted": "SIGABRT", "Killed": "SIGKILL",
          "Terminated": "SIGTERM", "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL"}


@dataclass(frozen=True)
class SignalReport:
    who: str               # "rank 3", "pid 16615", "srun task 0", "a process" (a line that names none)
    signal: str | None     # None: it ended by an exit code, not a signal


def _tasks(spec: str) -> int:
    """How many tasks srun's `0-1,3,6` names (at least 1)."""
    count = 0
    for part in spec.split(",")[:64]:
        low, _, high = part.partition("-")
        if low.isdigit() and high.isdigit() and int(high) >= int(low):
            count += min(int(high) - int(low) + 1, MAX_REPORTS)
        elif low.isdigit():
            count += 1
    return max(count, 1)


def _code_signal(code: str) -> str | None:
    return normalise(int(code))[1]


def reports_from_log(lines: Iterable[str]) -> list[SignalReport]:
    """PURE. Every process end the log's launcher summary or crash handlers report, one per process."""
    by_pid: dict[str, SignalReport] = {}
    anonymous: list[SignalReport] = []
    for raw in lines:
        line = raw[:MAX_LINE]
        if len(by_pid) + len(anonymous) >= MAX_REPORTS:
            break
        if (m := _TORCHRUN_EXIT.search(line) or _TORCHRUN_FAILED.search(line)) is not None:
            by_pid.setdefault(m.group(2), SignalReport(f"pid {m.group(2)}", _code_signal(m.group(1))))
        elif (m := _RECEIVED.search(line)) is not None:
            by_pid[m.group(3)] = SignalReport(f"pid {m.group(3)}", m.group(2))   # names the signal outright
        elif (m := _DEEPSPEED.search(line)) is not None:
            anonymous.append(SignalReport("a deepspeed rank", _code_signal(m.group(1))))
        elif (m := _SRUN.search(line)) is not None:
            anonymous += [SignalReport(f"srun task {m.group(1)}", _NAMES[m.group(2)])] * _tasks(m.group(1))
        elif (m := _CAUGHT.search(line)) is not None:
            report = SignalReport(f"pid {m.group(1)}" if m.group(1) else "a process", signal_of(int(m.group(2))))
            if m.group(1):
                by_pid.setdefault(m.group(1), report)
            else:
                anonymous.append(report)
        elif (m := _SPAWN.search(line)) is not None:
            by_pid.setdefault(f"spawn {m.group(1)}", SignalReport(f"spawned process {m.group(1)}", m.group(2)))
        elif (m := _OPEN_MPI.search(line)) is not None:
            by_pid.setdefault(m.group(1), SignalReport(f"pid {m.group(1)}", signal_of(int(m.group(2)))))
        elif (m := _FAULTHANDLER.search(line)) is not None:
            anonymous.append(SignalReport("a process", _NAMES[m.group(1)]))
    return (list(by_pid.values()) + anonymous)[:MAX_REPORTS]


def reports_from_ranks(ranks: Iterable[RankStatus]) -> list[SignalReport]:
    """PURE. The ranks' own recorded exits (RankStatus: exit_code, signal), those that ended."""
    out = []
    for rank in ranks:
        if (rank.exit_code is None and rank.signal is None) or getattr(rank, "exit_from_launcher", False):
            continue   # an exit known only from the launcher's summary is reports_from_log's, counted once
        out.append(SignalReport(f"rank {rank.rank}", normalise(rank.exit_code, rank.signal)[1]))
    return out


def same_signal_everywhere(reported: list[str | None], signals: Iterable[str] = CRASH_SIGNALS,
                           at_least: int = 2) -> str | None:
    """The one signal every reported process died of (`reported`: each report's signal), when there are at
    least `at_least` reports and it is one of `signals`; else None. A process that ended by an exit code (no
    signal) breaks the unanimity."""
    if len(reported) < at_least:
        return None
    found = set(reported)
    if len(found) != 1:
        return None
    (signal,) = found
    return signal if signal in set(signals) else None


__all__ = ["CRASH_SIGNALS", "SignalReport", "reports_from_log", "reports_from_ranks", "same_signal_everywhere"]
