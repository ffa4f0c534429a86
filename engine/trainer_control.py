"""The run's trainer and its settings: launch it (through its adapter), stop it, report on it, and
change the run config or environment that the next launch gets. Everything it does is journaled."""

from __future__ import annotations

import time
from pathlib import Path

from engine.journal import Journal
from engine.partial_saves import clear_trainer_tmp
from engine.state import TrainerStatus
from engine.trainer_process import TrainerProcess, signal_name


class TrainerControl:
    def __init__(self, loaded, adapter, journal: Journal, data_hash: str):
        self.loaded = loaded              # the run config in force; a recovery may rewrite it
        self.adapter = adapter
        self.journal = journal
        self.data_hash = data_hash
        self.process: TrainerProcess | None = None
        self.launches = 0
        self.extra_env: dict[str, str] = {}
        self.past_exit: tuple[int | None, str | None] = (None, None)   # what an earlier watcher saw (dry-run)

    @property
    def folder(self):
        return self.loaded.folder

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.alive

    @property
    def tokens_per_iter(self) -> int:
        return self.loaded.config.micro_batch_size * self.loaded.config.model.block_size

    def launch(self, resume_file: Path | None) -> TrainerProcess:
        self.launches += 1
        folder = self.folder
        launch_dir = folder.launch_dir(self.launches)
        launch_dir.mkdir(parents=True, exist_ok=True)
        self.loaded.save_copy(launch_dir / "run_config.yaml")  # the hyperparameters of this launch
        clear_trainer_tmp(self.loaded.out_dir)
        spec = self.adapter.prepare_launch(self.loaded, launch_dir, resume_file, self.data_hash)
        spec.env.update(self.extra_env)
        log_path = folder.trainer_log(self.launches)
        self.process = TrainerProcess.launch(spec, log_path, folder.exit_status(self.launches))
        folder.trainer_pid.write_text(f"{self.process.pid}\n")
        self.journal.append("launch", launch=self.launches, pid=self.process.pid, log=str(log_path),
                            exit_status=str(self.process.status_path), started=self.process.started_at,
                            resume_from=str(resume_file) if resume_file else None, argv=spec.argv)
        return self.process

    def attach(self, pid: int, log: Path, started: float | None, launch: int) -> TrainerProcess:
        """The trainer an earlier watcher launched, alive or not (its launcher recorded how it ended)."""
        self.process = TrainerProcess.attach(pid, log, started, self.folder.exit_status(launch))
        return self.process

    def stop(self, reason: str) -> str:
        if self.process is None:
            return "no trainer"
        text = self.process.stop(self.loaded.config.watch.grace_period_s)
        self.journal.append("trainer_stopped", pid=self.process.pid, reason=reason, detail=text)
        return text

    def status(self) -> TrainerStatus:
        t = self.process
        if t is None:
            code, sig = self.past_exit
            return TrainerStatus(launches=self.launches, exit_code=code, signal=sig)
        alive = t.alive
        code = None if alive else t.poll()
        return TrainerStatus(
            pid=t.pid, alive=alive, exit_code=code, signal=signal_name(code), launches=self.launches,
            seconds_running=time.time() - t.started_at, stopped=alive and t.stopped,
        )

    def write_config(self, updates: dict) -> None:
        self.loaded = self.loaded.write_back(updates)
        self.journal.append("config_changed", updates=updates)

    def set_env(self, variables: dict) -> None:
        self.extra_env.update(variables)
        self.journal.append("env", vars=variables)
