"""runbook's contract for your own training script (trainer kind `script`, docs/trainers.md): print
what runbook reads, save + exit 75 on a preemption notice, and tell runbook which rank this is.

    from runbook import sdk
    sdk.watch_notice()                          # at start: the notice signals (SIGTERM by default)
    sdk.resumed(path)                           # after loading a checkpoint
    batch = get_batch(sdk.data_position(step))  # the data position: past any window runbook skipped
    sdk.progress(step, loss)                    # after every optimizer step, on every rank (grad_norm=, lr=: optional)
    sdk.validation(step, val_loss)              # after each evaluation on held-out data (optional)
    sdk.saving(folder)                          # before the first byte of <out_dir>/step-<6 digits>/state.pt
    if sdk.notice(): save(); sys.exit(sdk.NOTICE_EXIT)

The lines it prints (rank 0 only: under torchrun, accelerate, deepspeed or srun every rank calls it,
one speaks) are `runbook: step N loss X took T ms [grad_norm G] [lr L]`, `runbook: step N val_loss X`, `runbook: saving PATH`,
`runbook: resumed PATH` (their grammar: docs/trainers.md, "The lines runbook reads").
Every rank writes its heartbeat (at import and each progress()) and its exit (an uncaught exception with
its message and, when raised in your own code, its file:line) where runbook asks (RUNBOOK_RANKS_DIR):
that is how runbook names the rank that failed first. Standard library only (no torch, nothing of the
engine): it runs inside your process, whose folder may hold an `engine.py` of its own.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from runbook.rank_records import RankRecorder

if TYPE_CHECKING:   # annotations only: nothing more is imported into the user's process
    from types import ModuleType

NOTICE_EXIT = 75                       # "saved on the notice": the preemption playbook resumes with 0 steps lost
_state: dict[str, Any] = {"noticed": None, "last": time.monotonic()}   # the signal number; monotonic time
RANK = RankRecorder()
RANK.heartbeat(None)
RANK.install_exit_hooks(lambda: NOTICE_EXIT if notice() else 0)


def is_rank_zero() -> bool:
    return RANK.me.rank == 0


def progress(step: int, loss: float, grad_norm: float | None = None, lr: float | None = None) -> None:
    """Call after every optimizer step, on every rank: `step` counts optimizer steps from the run's start,
    resumes included; grad_norm and lr, where given, are what playbooks' `metric: {name: grad_norm}` read.
    Rank 0 prints the line; every rank renews its heartbeat."""
    now = time.monotonic()
    took, _state["last"] = (now - _state["last"]) * 1000, now
    RANK.heartbeat(int(step))
    if is_rank_zero():
        extra = "".join(f" {name} {number:.6g}" for name, value in (("grad_norm", grad_norm), ("lr", lr))
                        if (number := _float_or_none(value)) is not None)
        print(f"runbook: step {int(step)} loss {float(loss):.6f} took {took:.1f} ms{extra}", flush=True)


def _float_or_none(value: float | None) -> float | None:
    """A number to print, or None: an optional metric of an odd type must never stop the training."""
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def validation(step: int, val_loss: float) -> None:
    """Call after an evaluation on held-out data: `runbook status`'s val, the best checkpoint retention keeps."""
    if is_rank_zero():
        print(f"runbook: step {int(step)} val_loss {float(val_loss):.6f}", flush=True)


def saving(path: str | os.PathLike[str]) -> None:
    """Call BEFORE the first byte of a checkpoint is written: runbook prunes only folders announced so."""
    if is_rank_zero():
        print(f"runbook: saving {os.path.abspath(path)}", flush=True)


def resumed(path: str | os.PathLike[str]) -> None:
    if is_rank_zero():
        print(f"runbook: resumed {os.path.abspath(path)}", flush=True)


def data_position(step: int) -> int:
    """The position in your data stream that optimizer step `step` (from 1) should train on: `step` itself until
    runbook skips a window of data after a divergence came back (RUNBOOK_DATA_SKIP, set for every later launch),
    then past it; the step counter, and so the lr schedule, stays where the checkpoint has it. Use it where your
    loop picks a batch: `batch = get_batch(sdk.data_position(step))`."""
    windows = _data_windows()
    return windows.position(step, windows.parse(os.environ.get(windows.ENV)))


def skipped_windows() -> list[tuple[int, int]]:
    """The data positions runbook has skipped for this run (RUNBOOK_DATA_SKIP), as (first, last) pairs; [] for none."""
    windows = _data_windows()
    return windows.parse(os.environ.get(windows.ENV))


def data_skipped(**where: object) -> None:
    """Say what the skipped windows left out, in your data's terms (files and byte offsets, rows, shards): runbook
    keeps it in the incident that made the skip, its run-log entry and the failure ledger. Plain JSON values;
    rank 0 prints it. E.g. `sdk.data_skipped(files=[{"file": "1-junk.txt", "bytes": "0-8191"}])`."""
    if is_rank_zero():
        print(_data_windows().report_line(where), file=sys.stderr, flush=True)


def _data_windows() -> ModuleType:
    """engine/core/data_windows.py, the one implementation, loaded by its path: nothing of the engine is imported by
    name here (your folder may hold an `engine` of its own)."""
    if "data_windows" not in _state:
        import importlib.util
        from pathlib import Path

        path = Path(__file__).resolve().parent.parent / "engine" / "core" / "data_windows.py"
        spec = importlib.util.spec_from_file_location("_runbook_data_windows", path)
        module = importlib.util.module_from_spec(spec)   # type: ignore[arg-type]
        spec.loader.exec_module(module)   # type: ignore[union-attr]
        _state["data_windows"] = module
    return _state["data_windows"]


def watch_notice() -> None:
    """Catch the notice signals runbook names (RUNBOOK_NOTICE_SIGNALS, default SIGTERM): notice() turns True."""
    names = os.environ.get("RUNBOOK_NOTICE_SIGNALS", "SIGTERM").split(",")
    for name in filter(None, (n.strip() for n in names)):
        signal.signal(getattr(signal, name), lambda signum, _frame: _state.update(noticed=signum))


def notice() -> bool:
    """True once a notice arrived: save the step just finished, call saving() first, then exit(NOTICE_EXIT)."""
    return _state["noticed"] is not None
