"""runbook's contract for your own training script (trainer kind `script`, docs/trainers.md): print
what runbook reads, and save + exit 75 on a preemption notice. Import-light on purpose (no torch)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

NOTICE_EXIT = 75                       # "saved on the notice": the preemption playbook resumes with 0 steps lost
_state: dict[str, Any] = {"noticed": None, "last": time.monotonic()}   # the signal number; monotonic time


def progress(step: int, loss: float) -> None:
    """Call after every optimizer step: `step` counts optimizer steps from the run's start, resumes included."""
    now = time.monotonic()
    took, _state["last"] = (now - _state["last"]) * 1000, now
    print(f"runbook: step {int(step)} loss {float(loss):.6f} took {took:.1f} ms", flush=True)


def saving(path) -> None:
    """Call BEFORE the first byte of a checkpoint is written: runbook prunes only folders announced so."""
    print(f"runbook: saving {os.path.abspath(path)}", flush=True)


def resumed(path) -> None:
    print(f"runbook: resumed {os.path.abspath(path)}", flush=True)


def watch_notice() -> None:
    """Catch the notice signals runbook names (RUNBOOK_NOTICE_SIGNALS, default SIGTERM): notice() turns True."""
    names = os.environ.get("RUNBOOK_NOTICE_SIGNALS", "SIGTERM").split(",")
    for name in filter(None, (n.strip() for n in names)):
        signal.signal(getattr(signal, name), lambda signum, _frame: _state.update(noticed=signum))


def notice() -> bool:
    """True once a notice arrived: save the step just finished, call saving() first, then exit(NOTICE_EXIT)."""
    return _state["noticed"] is not None
