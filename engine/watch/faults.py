"""Faults injected from outside a real run, for drills and benchmarks: the seed's "break it on purpose".

Each Fault says how to set the run up (config changes) and what to do to the live trainer, and
which playbook is expected to answer. The timings and limits below were measured on the embedded
tiny model on a 2-core CPU machine; the tests use the same numbers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pydantic import BaseModel

from engine.observe.events import Progress
from engine.trainers.base import TrainerAdapter


@dataclass(frozen=True)
class Fault:
    name: str
    expected_playbooks: tuple[str, ...]   # any of these answering counts (which one can depend on timing)
    description: str
    config: dict = field(default_factory=dict)
    inject: Callable[["DrillRun"], float | None] | None = None   # returns when the fault was injected


def config_for(config: dict, settings: type[BaseModel]) -> dict:
    """PURE. A fault's config changes for a run whose trainer's settings model is `settings`: trainer keys
    that model lacks (the slow drill's eval_interval, under a trainer without it) are left out, not a config error."""
    if "trainer" not in config:
        return dict(config)
    return {**config, "trainer": {k: v for k, v in config["trainer"].items() if k in settings.model_fields}}


class DrillRun:
    """What an injector needs: where the run writes, its trainer's adapter, and how to wait for it."""

    def __init__(self, out_dir: Path, run_dir: Path, watcher: subprocess.Popen, adapter: TrainerAdapter,
                 timeout: float = 300.0):
        self.out_dir, self.run_dir, self.watcher, self.timeout = out_dir, run_dir, watcher, timeout
        self.adapter, self.layout = adapter, adapter.layout

    def trainer_pid(self) -> int:
        return int((self.run_dir / "trainer.pid").read_text())

    def checkpoint_folders(self) -> list[Path]:
        """The step checkpoint folders in out_dir, oldest first."""
        found = [(step, p) for p in self.out_dir.iterdir() if (step := self.layout.step_of(p.name)) is not None] \
            if self.out_dir.is_dir() else []
        return [p for _step, p in sorted(found)]

    def save_complete(self, folder: Path) -> bool:
        files = [self.layout.resume_file(folder), *(folder / n for n in self.layout.required_files)]
        return all(f.exists() for f in files)

    def wait_for_checkpoint(self, count: int) -> Path:
        """The folder of the count-th checkpoint, once its save is complete (all its files written)."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            done = [p for p in self.checkpoint_folders() if self.save_complete(p)]
            if len(done) >= count:
                return done[count - 1]
            if self.watcher.poll() is not None:
                raise RuntimeError(f"the watcher exited ({self.watcher.returncode}) before checkpoint {count}")
            time.sleep(0.05)
        raise TimeoutError(f"no checkpoint {count} after {self.timeout:g} s")

    def wait_for_progress(self, lines: int) -> None:
        """Until the trainer's logs hold `lines` progress lines; a dead watcher ends the wait at once (the
        slow drill waited out its 300 s for a watcher that had exited)."""
        deadline = time.monotonic() + self.timeout
        while (seen := self.progress_lines()) < lines:
            if self.watcher.poll() is not None:
                raise RuntimeError(f"the watcher exited ({self.watcher.returncode}) after {seen} of the {lines} "
                                   "progress lines the fault waits for")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{seen} of {lines} progress lines after {self.timeout:g} s")
            time.sleep(0.1)

    def progress_lines(self) -> int:
        return sum(isinstance(self.adapter.parse_line(line), Progress)
                   for log in (self.run_dir / "logs").glob("trainer-*.log")
                   for line in log.read_text(errors="replace").splitlines())


def _signal_after_checkpoint(sig: int, count: int) -> Callable[[DrillRun], float]:
    def inject(run: DrillRun) -> float:
        run.wait_for_checkpoint(count)
        os.kill(run.trainer_pid(), sig)
        return time.time()

    return inject


def _corrupt_then_kill(run: DrillRun) -> float:
    """Truncate the newest checkpoint, flip a byte in the one before, then kill the trainer."""
    run.wait_for_checkpoint(3)
    pid = run.trainer_pid()
    os.kill(pid, signal.SIGSTOP)
    # the stop may land mid-save: the two to damage are the newest whose saves are complete
    *_, older, newest = [None, *(f for f in run.checkpoint_folders() if run.save_complete(f))]
    resume_file = run.layout.resume_file(newest)
    with open(resume_file, "r+b") as fh:
        fh.truncate(resume_file.stat().st_size // 2)
    if older is not None and older != newest:
        target = run.layout.resume_file(older)
        with open(target, "r+b") as fh:
            fh.seek(target.stat().st_size // 2)
            byte = fh.read(1)
            fh.seek(-1, os.SEEK_CUR)
            fh.write(bytes([byte[0] ^ 0xFF]))
    os.kill(pid, signal.SIGKILL)
    return time.time()


BASELINE_LINES = 60   # progress lines before the slow drill throttles: the watcher has a throughput baseline


def _throttle(run: DrillRun) -> float:
    """A 75% SIGSTOP duty cycle for 15 s once the run has a throughput baseline."""
    run.wait_for_progress(BASELINE_LINES)
    pid, started = run.trainer_pid(), time.time()

    def cycle() -> None:
        end = time.monotonic() + 15
        try:
            while time.monotonic() < end:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(0.15)
                os.kill(pid, signal.SIGCONT)
                time.sleep(0.05)
        except ProcessLookupError:
            pass

    threading.Thread(target=cycle, daemon=True).start()
    return started


FAULTS: dict[str, Fault] = {f.name: f for f in (
    Fault("preemption", ("preemption",), "SIGTERM to the trainer after its second checkpoint",
          inject=_signal_after_checkpoint(signal.SIGTERM, 2)),
    Fault("hang", ("hang",), "SIGSTOP the trainer after its first checkpoint (it never continues by itself)",
          config={"watch": {"hang_floor_s": 5.0}}, inject=_signal_after_checkpoint(signal.SIGSTOP, 1)),
    Fault("corrupt-checkpoint", ("corrupt-checkpoint", "killed"), "truncate the newest checkpoint, flip a byte in the one before, SIGKILL",
          inject=_corrupt_then_kill),
    Fault("oom", ("oom",), "micro_batch_size 512 under a 1300 MB address-space limit on the trainer (the seed's 999 drill)",
          config={"micro_batch_size": 512, "batch_size": 512, "max_tokens": 65536, "save_interval": 1,
                  "trainer": {"memory_limit_mb": 1300, "device": "cpu"}}),
    Fault("nan", ("nan", "loss-spike"), "lr 10: the gradients go non-finite around step 11", config={"lr": 10.0}),
    Fault("loss-spike", ("loss-spike",), "lr 1: the loss diverges to ~17 without crashing", config={"lr": 1.0}),
    Fault("slow", ("slow-training",), "a 75% SIGSTOP/SIGCONT duty cycle for 15 s after the baseline is set",
          config={"max_tokens": 409600, "save_interval": 100, "trainer": {"eval_interval": 100}}, inject=_throttle),
)}
