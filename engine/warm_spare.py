"""The watcher's side of a warm spare (engine/spare_main.py): a trainer interpreter started ahead of
time with the trainer's heavy modules imported (torch, lightning, litgpt: 2.5-7 s of a relaunch on 2
cores), which becomes the next launch instead of a cold start.

Why a spawned interpreter and not a fork of a warm one: the watcher and a warm torch process both
run threads (APScheduler; torch's pools), and a fork copies only the forking thread, so locks held
by the others stay locked in the child. The spare is exec'd fresh, imports, and becomes the trainer
itself, never forking. Its launcher (engine/launcher.py) is started with it, so its exit is still
recorded; on adoption the launch's exit-status file is filled in and the launcher told to write the
final status there too (STATUS.redirect).

A spare is used only when the launch would have started it the same way: same interpreter, cwd,
memory limit, stop signals, imports, and environment (apart from variables read after the imports:
RUNBOOK_*, WANDB_*, NCCL_*, GLOO_*, MASTER_*). Otherwise it is discarded and the launch is cold.
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

LATE_ENV_PREFIXES = ("RUNBOOK_", "WANDB_", "NCCL_", "TORCH_NCCL_", "GLOO_", "MASTER_")
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
            return json.loads(self.status_path.read_text()).get("trainer_pid")
        except (OSError, ValueError):
            return None

    def alive(self) -> bool:
        return self.launcher.poll() is None

    def wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not (self.folder / "ready").exists():
            if not self.alive() or time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def discard(self) -> None:
        pid = self.pid
        if pid and self.alive():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.launcher.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.launcher.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


def spare_key(spec) -> tuple:
    return (tuple(spec.argv[:1]), str(spec.cwd), spec.memory_limit_bytes, spec.notice_signal, spec.quit_signal,
            tuple(spec.warm_imports), tuple(sorted(early_env(spec.env).items())))


_spare: Spare | None = None   # one watcher per process, one spare per watcher
_pending: threading.Event | None = None   # set to cancel a spare still waiting to start
_lock = threading.Lock()
_requested = False   # a spare was asked for in this watcher (a launch without one then says why)


def start_spare_after(spec, launcher_path: Path, log_path: Path, preexec_fn=None, timeout_s: float = 3600.0) -> None:
    """Start the next launch's spare once this launch trains (spec.training_marker starts a line of its
    log): its imports then take the CPU from a running trainer, not from one that is starting."""
    global _pending, _requested
    if spec.warm_spare_dir is None or not spec.warm_imports:
        return
    _requested = True
    cancel = threading.Event()
    with _lock:
        if _pending is not None:
            _pending.set()
        _pending = cancel
    offset = log_path.stat().st_size if log_path.exists() else 0
    marker = spec.training_marker.encode()

    def wait_then_start() -> None:
        deadline = time.monotonic() + timeout_s
        while not cancel.wait(0.2):
            try:
                with open(log_path, "rb") as fh:
                    fh.seek(offset)
                    text = fh.read()
            except OSError:
                text = b""
            if (b"\n" + marker) in text or text.startswith(marker) or time.monotonic() > deadline:
                with _lock:
                    if not cancel.is_set():
                        start_spare(spec, launcher_path, preexec_fn)
                return

    threading.Thread(target=wait_then_start, name="warm spare", daemon=True).start()


def start_spare(spec, launcher_path: Path, preexec_fn=None) -> Spare | None:
    """Start a spare shaped like `spec` in spec.warm_spare_dir (replacing any earlier one). Under _lock."""
    global _spare
    old, _spare = _spare, None   # the caller holds _lock
    if old is not None:
        old.discard()
    if spec.warm_spare_dir is None or not spec.warm_imports:
        return None
    remove_ended(Path(spec.warm_spare_dir))
    folder = Path(spec.warm_spare_dir) / f"spare-{time.time_ns()}"
    folder.mkdir(parents=True)
    status = folder / "exit-status.json"
    signals = ["--quit-signal", spec.quit_signal] + (["--notice-signal", spec.notice_signal] if spec.notice_signal else [])
    argv = [sys.executable, str(launcher_path), str(status), *signals, "--", spec.argv[0], "-m", "engine.spare_main",
            str(folder), str(os.getpid()), *spec.warm_imports]
    with open(folder / "spare.log", "ab") as log:
        launcher = subprocess.Popen(argv, cwd=spec.cwd, env=spec.env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=preexec_fn)
    _spare = Spare(folder, launcher, spare_key(spec), status)
    return _spare


def take_spare(spec, log_path: Path, status_path: Path) -> tuple[int, subprocess.Popen] | None:
    """Hand this launch to the spare when it matches: (trainer pid, its launcher); None: launch cold."""
    global _spare
    with _lock:
        if _pending is not None:
            _pending.set()
        spare, _spare = _spare, None
    if spare is None:
        if _requested and spec.warm_spare_dir is not None and spec.warm_imports:
            with open(log_path, "a", encoding="utf-8") as log:
                log.write("runbook: no warm spare (the previous launch never reached training): cold launch\n")
        return None
    why = unusable(spare, spec)
    if why is not None:
        spare.discard()
        with open(log_path, "a", encoding="utf-8") as log:   # the launch's own log says why it is cold
            log.write(f"runbook: warm spare not used ({why}): cold launch\n")
        return None
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


def unusable(spare: Spare, spec) -> str | None:
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


def discard_spare() -> None:
    global _spare
    with _lock:
        if _pending is not None:
            _pending.set()
        spare, _spare = _spare, None
    if spare is not None:
        spare.discard()


def remove_ended(parent: Path) -> None:
    """The folders of spares that became launches and have ended (their launcher wrote an exit)."""
    for folder in parent.glob("spare-*") if parent.is_dir() else ():
        try:
            ended = "exit_code" in json.loads((folder / "exit-status.json").read_text())
        except (OSError, ValueError):
            ended = False
        if ended:
            shutil.rmtree(folder, ignore_errors=True)
