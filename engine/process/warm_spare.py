"""The watcher's side of a warm spare (engine/process/spare_main.py): a trainer interpreter started ahead of
time with the trainer's heavy modules imported (torch, lightning, litgpt: 2.5-7 s of a relaunch on 2
cores), which becomes the next launch instead of a cold start.

Why a spawned interpreter and not a fork of a warm one: the watcher and a warm torch process both
run threads (APScheduler; torch's pools), and a fork copies only the forking thread, so locks taken
by the others stay locked in the child. The spare is exec'd fresh, imports, and becomes the trainer
itself, never forking. Its launcher (engine/process/launcher.py) is started with it, so its exit is still
recorded; on adoption the launch's exit-status file is filled in and the launcher told to write the
final status there too (STATUS.redirect).

A spare is used only when the launch would have started it the same way: same interpreter, cwd,
memory limit, stop signals, imports, and environment (apart from variables read after the imports:
RUNBOOK_*, WANDB_*, NCCL_*, GLOO_*, MASTER_*, TORCH_DISTRIBUTED_DEBUG, which spare_main re-applies).
Otherwise it is discarded and the launch is cold.

Owned by one watcher (SparePool: its TrainerControl launches from it, its Supervisor discards what is
left). When: the first spare is started as the watcher starts (engine/watch/startup.py prestart_spare), so its
imports overlap the watcher's own start-up (config, data hash, litgpt's preflight parse) and the first
launch is warm; until a launch has trained, each launch starts the next spare at once, so a launch that
dies early (an OOM at start, a bad config) is still followed by a warm relaunch; after that the next
spare starts once its launch trains (SparePool.start_next says why). The spare waits at nice +10
where it may return to its priority when it becomes the trainer (root, or RLIMIT_NICE allows it): its
imports then use the CPU the running trainer leaves idle.
Costs: one more idle interpreter (~300 MB RSS with torch) and its imports' CPU beside the trainer.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine.core.bounded_read import read_json_record
from engine.process.identity import ProvenProcess
from engine.process.launch_spec import LAUNCHER, LaunchSpec
from engine.process.spare_main import restore_all_threads

# read after the imports, or re-applied by spare_main (TORCH_DISTRIBUTED_DEBUG: the hang playbook sets it)
LATE_ENV_PREFIXES = ("RUNBOOK_", "WANDB_", "NCCL_", "TORCH_NCCL_", "GLOO_", "MASTER_", "TORCH_DISTRIBUTED_DEBUG")
READY_WAIT_S = 30.0   # a spare still importing is waited for (it has a head start on a cold launch)


def early_env(env: dict[str, str]) -> dict[str, str]:
    """PURE. The variables that may shape the imports (all but those read later)."""
    return {k: v for k, v in env.items() if not k.startswith(LATE_ENV_PREFIXES)}


@dataclass
class Spare:
    folder: Path
    launcher: subprocess.Popen
    key: tuple          # what it was started with: a launch must match it to use it
    status_path: Path   # its launcher's status file

    @property
    def pid(self) -> int | None:
        try:
            return read_json_record(self.status_path).get("trainer_pid")
        except (OSError, ValueError, AttributeError):
            return None

    def alive(self) -> bool:
        return self.launcher.poll() is None

    def wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        if not (self.folder / "ready").exists():
            self.hurry()
        while not (self.folder / "ready").exists():
            if not self.alive() or time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def hurry(self) -> None:
        """A launch waits for this spare's imports: back to the watcher's priority (spare_main runs them under SCHED_IDLE)."""
        pid = self.pid
        if pid is None:
            return

        restore_all_threads(pid, os.getpriority(os.PRIO_PROCESS, 0))   # not allowed: it finishes at its own pace

    def discard(self) -> None:
        pid = self.pid
        if pid and self.alive():   # its launcher's record pins the process (never a reused pid)

            try:
                ticks = read_json_record(self.status_path).get("trainer_start_ticks")
            except (OSError, ValueError, AttributeError):
                ticks = None
            ProvenProcess(pid, ticks).send(signal.SIGKILL)
        try:
            self.launcher.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.launcher.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


def spare_key(spec: LaunchSpec) -> tuple:
    return (tuple(spec.argv[:1]), str(spec.cwd), spec.memory_limit_bytes, spec.notice_signal, spec.quit_signal,
            tuple(spec.warm_imports), tuple(sorted(early_env(spec.env).items())))


MARKER_WAIT_S = 3600.0


def memory_limiter(limit: int | None) -> Callable[[], None] | None:
    """The preexec_fn a launch uses for its RLIMIT_AS (the spare must start under the same limit)."""
    if not limit:
        return None

    def limit_memory() -> None:   # runs in the child between fork and exec; the trainer inherits it
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return limit_memory


class SparePool:
    """One watcher's warm spare: at most one at a time, owned by the watcher that started it (its
    TrainerControl launches from it; the Supervisor discards what is left as it ends)."""

    def __init__(self) -> None:
        self._spare: Spare | None = None
        self._lock = threading.Lock()
        self.requested = False   # a spare was asked for by this watcher (a launch without one then says why)
        self.trained = False     # a launch of this watcher has trained: later spares wait for their launch to train
        self._pending: threading.Event | None = None   # set to cancel a spare not yet started

    @property
    def current(self) -> Spare | None:
        """The spare waiting now (started, maybe still importing), or None."""
        return self._spare

    def start_next(self, spec: LaunchSpec, launcher_path: Path, log_path: Path | None = None) -> None:
        """Start the next launch's spare, in a thread (the launch never waits for it). Until a launch of this
        watcher has trained (spec.training_marker starts a line of its log) it starts at once: a launch that
        dies at start (an OOM, a bad setting) is then followed by a warm relaunch. Afterwards it starts once
        this launch trains: its imports then never compete with this launch's own start (measured: a spare
        importing beside a warm relaunch at nice 0 made relaunch -> first step about 3x longer under load)."""
        if spec.warm_spare_dir is None or not spec.warm_imports:
            return
        self.requested = True
        cancel = threading.Event()
        with self._lock:
            if self._pending is not None:
                self._pending.set()
            self._pending = cancel
        offset = log_path.stat().st_size if log_path is not None and log_path.exists() else 0
        marker = spec.training_marker.encode()

        def start() -> None:
            with self._lock:
                if not cancel.is_set():
                    self._start(spec, launcher_path, memory_limiter(spec.memory_limit_bytes))

        def trains(log_path: Path) -> bool:
            if not marker:
                return True
            try:
                with open(log_path, "rb") as fh:
                    fh.seek(offset)
                    text = fh.read()
            except OSError:
                return False
            return (b"\n" + marker) in text or text.startswith(marker)

        def wait_then_start() -> None:
            started = not self.trained or log_path is None
            if started:
                start()
            if log_path is None:
                return   # the prestarted spare: no launch to watch yet
            deadline = time.monotonic() + MARKER_WAIT_S
            while not cancel.wait(0.2):
                if trains(log_path) or time.monotonic() > deadline:
                    self.trained = True
                    if not started:
                        start()
                    return

        threading.Thread(target=wait_then_start, name="warm spare", daemon=True).start()

    def prestart(self, spec: LaunchSpec) -> None:
        """The first launch's spare, started while the watcher starts up (engine/watch/startup.py)."""
        self.start_next(spec, LAUNCHER)

    def _start(self, spec: LaunchSpec, launcher_path: Path,
               preexec_fn: Callable[[], None] | None = None) -> Spare | None:
        """Start a spare shaped like `spec` in spec.warm_spare_dir (replacing any earlier one). Under _lock."""
        old, self._spare = self._spare, None
        if old is not None and old.alive() and old.key == spare_key(spec):
            self._spare = old   # already the right shape (the prestarted one, not yet taken)
            return old
        if old is not None:
            old.discard()
        if spec.warm_spare_dir is None or not spec.warm_imports:
            return None
        remove_ended(Path(spec.warm_spare_dir))
        folder = Path(spec.warm_spare_dir) / f"spare-{time.time_ns()}"
        folder.mkdir(parents=True)
        status = folder / "exit-status.json"
        signals = ["--quit-signal", spec.quit_signal] + (["--notice-signal", spec.notice_signal] if spec.notice_signal else [])
        argv = [sys.executable, str(launcher_path), str(status), *signals, "--", spec.argv[0], "-m",
                "engine.process.spare_main", str(folder), str(os.getpid()), *spec.warm_imports]
        with open(folder / "spare.log", "ab") as log:
            launcher = subprocess.Popen(argv, cwd=spec.cwd, env=spec.env, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=preexec_fn)
        self._spare = Spare(folder, launcher, spare_key(spec), status)
        return self._spare

    def take(self, spec: LaunchSpec, log_path: Path, status_path: Path) -> tuple[int, subprocess.Popen] | None:
        """Hand this launch to the spare when it matches: (trainer pid, its launcher); None: launch cold."""
        with self._lock:   # a spare still being started is waited for
            if self._pending is not None:
                self._pending.set()
            spare, self._spare = self._spare, None
        if spare is None:
            if self.requested and spec.warm_spare_dir is not None and spec.warm_imports:
                with open(log_path, "a", encoding="utf-8") as log:
                    log.write("runbook: no warm spare (none started: the launch before never reached training): cold launch\n")
            return None
        why = unusable(spare, spec)
        if why is not None:
            keep = spare.key == spare_key(spec) and spare.alive()   # right shape, but not this launch (a preprocessing step)
            if keep:
                with self._lock:
                    self._spare = spare if self._spare is None else self._spare
                if self._spare is not spare:
                    spare.discard()
            else:
                spare.discard()
            with open(log_path, "a", encoding="utf-8") as log:   # the launch's own log says why it is cold
                log.write(f"runbook: warm spare not used ({why}): cold launch" + (", the spare kept for the next" if keep else "") + "\n")
            return None
        return hand_over(spare, spec, log_path, status_path)

    def discard(self) -> None:
        with self._lock:
            if self._pending is not None:
                self._pending.set()
            spare, self._spare = self._spare, None
        if spare is not None:
            spare.discard()


def hand_over(spare: Spare, spec: LaunchSpec, log_path: Path, status_path: Path) -> tuple[int, subprocess.Popen]:
    """The spare becomes this launch: its status is this launch's, and it is told what to run (go.json)."""
    status = json.loads(spare.status_path.read_text())
    (spare.status_path.parent / (spare.status_path.name + ".redirect")).write_text(str(status_path))
    status_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = status_path.with_name(status_path.name + ".part")
    tmp.write_text(json.dumps({**status, "warm_spare": str(spare.folder)}))
    os.replace(tmp, status_path)
    ready_at = (spare.folder / "ready").stat().st_mtime
    go = {"argv": spec.argv, "env": spec.env, "cwd": str(spec.cwd), "log": str(log_path), "waited_s": time.time() - ready_at}
    tmp = spare.folder / "go.json.part"
    tmp.write_text(json.dumps(go))
    os.replace(tmp, spare.folder / "go.json")
    return status["trainer_pid"], spare.launcher


def unusable(spare: Spare, spec: LaunchSpec) -> str | None:
    """Why this launch cannot be the spare, or None."""
    key = spare_key(spec)
    if spare.key != key:
        names = ("interpreter", "cwd", "memory limit", "notice signal", "quit signal", "imports", "environment")
        differ = [n for n, a, b in zip(names, spare.key, key) if a != b]
        if "environment" in differ:
            old, new = dict(spare.key[-1]), dict(key[-1])
            differ[-1] = "environment: " + ", ".join(sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k)))
        return "started for another launch shape: " + "; ".join(differ)
    if spec.argv[1:2] != ["-m"]:
        return "the launch is not `python -m MODULE`"
    if not spare.wait_ready(READY_WAIT_S):
        return f"not ready within {READY_WAIT_S:g} s" if spare.alive() else "it ended before it was ready"
    if spare.pid is None:
        return "its pid is unknown"
    return None


def remove_ended(parent: Path) -> None:
    """The folders of spares that became launches and have ended (their launcher wrote an exit)."""
    for folder in parent.glob("spare-*") if parent.is_dir() else ():
        try:
            ended = "exit_code" in read_json_record(folder / "exit-status.json")
        except (OSError, ValueError, TypeError):
            ended = False
        if ended:
            shutil.rmtree(folder, ignore_errors=True)
