"""How a trainer ended, normalised once: exit codes and signals as every layer reports them.

PURE: no process, no file. The exit clause (engine/language/clauses/exit.py), the trainer control and
its launcher (engine/process) and the dry run all read exits through here, so `137`, `-9`, `247` and a
torchrun block saying `exitcode : -9` are the same SIGKILL everywhere.

An exit reaches runbook in one of these shapes:

- Popen's convention: a negative code -N is "killed by signal N" (runbook's own launcher records this);
- a shell's: 128+N for signal N (`bash -c trainer`, srun, a container entrypoint), so 137 is SIGKILL;
- the 8-bit wrap of `sys.exit(-N)` (or `exit(-N)` in C): 256-N, so a trainer that re-raises a SIGKILL as
  `sys.exit(-9)` exits 247. Only the signals a trainer actually dies of are read this way (SIGKILL,
  SIGTERM, SIGABRT, SIGSEGV, SIGBUS, SIGINT): 255 stays the generic failure of `exit(-1)`;
- a launcher's own exit code (torchrun, deepspeed, srun exit 1 whatever killed the rank): the failing
  rank's own code is then only in the launcher's log, which `rank_exit_from_log` reads.
"""

from __future__ import annotations

import re
import signal as _signal
from typing import Iterable

# A trainer that saved a checkpoint on a notice signal and stopped, to be resumed (sysexits EX_TEMPFAIL),
# whatever the trainer: its notice handler (engine/trainers/<name>/), runbook.sdk in a plain script; playbooks/preemption.yaml.
SAVED_ON_NOTICE = 75
# The signals a trainer dies of, for the 256-N wrap (SIGHUP's 255 is everybody's generic "exit -1").
WRAPPED_SIGNALS = frozenset({2, 6, 7, 9, 11, 15})
MAX_LINE = 4096   # launcher summary lines are short; a longer line is read on its first MAX_LINE characters


def signal_number(name: str | None) -> int | None:
    """'SIGKILL' -> 9; None for an unknown name."""
    if not name:
        return None
    try:
        return int(_signal.Signals[name])
    except KeyError:
        return None


def signal_of(number: int) -> str | None:
    try:
        return _signal.Signals(number).name
    except ValueError:
        return None


def signal_from_code(code: int | None) -> str | None:
    """The signal an exit code stands for: -N (Popen), 128+N (a shell), 256-N (sys.exit(-N) wrapped)."""
    if code is None or isinstance(code, bool):
        return None
    if code < 0:
        return signal_of(-code)
    if 128 < code < 128 + 65:
        return signal_of(code - 128)
    if 256 - code in WRAPPED_SIGNALS:
        return signal_of(256 - code)
    return None


def normalise(code: int | None, signal: str | None = None) -> tuple[int | None, str | None]:
    """(exit code as given, signal): the signal given wins, else the one the code stands for.
    The code is kept as reported (`codes: [137]` in a playbook still means 137)."""
    if signal and signal_number(signal) is not None:
        return code, signal
    return code, signal_from_code(code)


def popen_code(code: int | None) -> int | None:
    """A shell's or a wrapped exit as Popen reports a signal death: 137 -> -9, 247 -> -9, 1 -> 1."""
    sig = signal_from_code(code)
    return -int(_signal.Signals[sig]) if sig and code is not None and code > 0 else code


# A launcher's report of the failing rank, its own code or signal (bounded patterns, linear time):
#   torchrun:  `failed (exitcode: -9) local_rank: 4 (pid: 899509)`, `exitcode  : -9 (pid: 3309)`,
#              `traceback : Signal 9 (SIGKILL) received by PID 36071`
#   deepspeed: `[...] exits with return code = -9`
#   srun:      `srun: error: node: task 0: Killed`, `task 0: Segmentation fault`, `tasks 2-3: Exited with exit code 1`
#   mp.spawn:  `ProcessExitedException: process 0 terminated with signal SIGKILL` (older torch: `Exception: ...`)
_EXITCODE = re.compile(r"exitcode\s{0,8}:\s{0,8}(-?\d{1,3})\b")
_SIGNAL_RECEIVED = re.compile(r"[Ss]ignal (\d{1,2}) \((SIG[A-Z0-9]{2,8})\) received by PID")
_DEEPSPEED = re.compile(r"exits with return code = (-?\d{1,3})\b")
_SRUN_TASK = re.compile(r"srun: error: \S{1,200}: tasks? [\d,-]{1,100}: (Killed|Segmentation fault|Aborted|Bus error|Terminated|Exited with exit code (\d{1,3}))")
_SRUN_SIGNALS = {"Killed": "SIGKILL", "Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
                 "Terminated": "SIGTERM"}
_SPAWN_SIGNAL = re.compile(r"\b[Pp]rocess \d{1,5} terminated with signal (SIG[A-Z0-9]{2,8})\b")
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\)")


def rank_exit_from_log(lines: Iterable[str]) -> tuple[int | None, str | None] | None:
    """PURE. The failing rank's own (exit code, signal) as its launcher printed it, or None.

    torchrun prints every failed rank and then the root cause (the first to fail): the root cause's
    exit is taken when it is there, else the first failure reported. A signal stated outright
    (`Signal 9 (SIGKILL) received by PID`) belongs to the failure printed just before it."""
    first: list | None = None
    root: list | None = None
    current: list | None = None
    after_root_cause = False
    for raw in lines:
        line = raw[:MAX_LINE]
        if _ROOT_CAUSE.search(line):
            after_root_cause, current = True, None
            continue
        entry = None
        match = _EXITCODE.search(line) or _DEEPSPEED.search(line)
        if match:
            entry = list(normalise(int(match.group(1))))
        elif (match := _SRUN_TASK.search(line)) is not None:
            entry = [int(match.group(2)), None] if match.group(2) else [None, _SRUN_SIGNALS[match.group(1)]]
        elif (match := _SPAWN_SIGNAL.search(line)) is not None and (number := signal_number(match.group(1))) is not None:
            entry = [-number, match.group(1)]
        elif (match := _SIGNAL_RECEIVED.search(line)) is not None and (number := signal_number(match.group(2))) is not None:
            if current is not None:
                current[:] = [-number, match.group(2)]
                continue
            entry = [-number, match.group(2)]
        if entry is None:
            continue
        current = entry
        if first is None:
            first = entry
        if after_root_cause and root is None:
            root = entry
    chosen = root or first
    return None if chosen is None else (chosen[0], chosen[1])


def effective_exit(code: int | None, signal: str | None, tail: Iterable[str] = ()) -> tuple[int | None, str | None]:
    """PURE. What a playbook's exit clause sees: the trainer's (code, signal) normalised, and, when the
    trainer is a launcher that only says "a rank failed" (no signal of its own), the failing rank's own
    signal from the launcher's log. The code stays the trainer's (what the process really returned)."""
    code, sig = normalise(code, signal)
    if sig is None and code not in (0, None):
        rank = rank_exit_from_log(tail)
        if rank is not None and rank[1] is not None:
            sig = rank[1]
    return code, sig


__all__ = ["effective_exit", "normalise", "popen_code", "rank_exit_from_log", "signal_from_code", "signal_number"]
