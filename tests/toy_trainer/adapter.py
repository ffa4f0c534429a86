"""runbook's adapter for the toy trainer (trainer.py): its launch, its log lines, its checkpoint layout."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sys
from pathlib import Path

from pydantic import ConfigDict

from engine.core.config import ModelSection, TrainerSettings
from engine.observe.events import CheckpointSaving, Event, Progress, Resumed, Validation, ValidationStarted
from engine.trainers.base import EVERY_TRAINER_METRICS, LaunchSpec, ProgressMeaning, ResumePlan, micro_batch_meaning

TRAINER = Path(__file__).with_name("trainer.py")
STATE_NAME, CHECKSUM_NAME = "state.json", "state.sha256"
FOLDER = re.compile(r"^ckpt-(\d{6})$")
PROGRESS = re.compile(r"^toy step (\d+)/\d+ loss (\S+) took (\d+(?:\.\d*)?) ms$")
SAVING = re.compile(r"^toy: saving (.+)$")
RESUMING = re.compile(r"^toy: resuming from (.+)$")
VALIDATION = re.compile(r"^toy val step (\d+) val_loss (\S+)$")
NOTICE_SIGNALS_ENV = "RUNBOOK_NOTICE_SIGNALS"   # trainer.py saves the step in progress on these and exits 75


class ToyLayout:
    final_name = "final"
    checkpoint_files = frozenset({STATE_NAME, CHECKSUM_NAME})
    required_files = (CHECKSUM_NAME,)

    def step_of(self, folder_name: str) -> int | None:
        m = FOLDER.match(folder_name)
        return int(m.group(1)) if m else None

    def folder_name(self, step: int) -> str:
        return f"ckpt-{step:06d}"

    def resume_file(self, folder: Path) -> Path:
        return Path(folder) / STATE_NAME

    def step_in_path(self, path: str) -> int | None:
        found = re.findall(r"ckpt-(\d+)", path)
        return int(found[-1]) if found else None

    def scan(self, folder: Path, want_sha256: bool) -> tuple[str | None, dict[str, str]]:
        digest = hashlib.sha256(self.resume_file(folder).read_bytes()).hexdigest()
        if (Path(folder) / CHECKSUM_NAME).read_text().strip() != digest:
            return f"{STATE_NAME} does not match {CHECKSUM_NAME} (corrupted)", {}
        return None, {STATE_NAME: digest}

    def looks_whole(self, folder: Path) -> bool:
        try:
            json.loads(self.resume_file(folder).read_bytes())
            return True
        except (OSError, ValueError):
            return False

    def announced_saves(self, log_text: bytes, out_dir: Path) -> set[str]:
        roots = {os.path.abspath(out_dir), os.path.realpath(out_dir)}
        names = set()
        for line in log_text.decode("utf-8", "replace").splitlines():
            if (m := SAVING.match(line)):
                root, name = os.path.split(os.path.normpath(m.group(1)))
                if root in roots and (name == self.final_name or self.step_of(name) is not None):
                    names.add(name)
        return names


class ToyModel(ModelSection):
    # The toy's configs are copies of the shipped litgpt one: its model keys are there, and unused.
    model_config = ConfigDict(extra="ignore")


class ToySettings(TrainerSettings):
    """The toy's `trainer:` section: the core's keys; litgpt's, left in a copied config, are ignored."""

    model_config = ConfigDict(extra="ignore")
    model_section = ToyModel


class ToyAdapter:
    name = "toy"
    settings_model = ToySettings
    metrics_provided = EVERY_TRAINER_METRICS   # its line prints step, loss and time only
    install_hint = f"{TRAINER} is part of runbook's repository: run from a checkout that has tests/toy_trainer/"

    def __init__(self):
        self.layout = ToyLayout()

    def progress_meaning(self, config) -> ProgressMeaning:
        return micro_batch_meaning(config)   # a line per step of one micro-batch on each rank

    def is_installed(self) -> bool:
        return TRAINER.is_file()

    def check_environment(self, loaded) -> list[str]:
        if loaded.config.trainer.device == "cuda":   # it needs no tokenizer: its "model" is a list of floats
            return [f"trainer.device is 'cuda' in {loaded.path} but the toy trainer runs on the CPU only; "
                    "set trainer.device: auto (or cpu)"]
        return []

    def data_fingerprint(self, loaded) -> str | None:
        return None   # reads the .txt folders: runbook's own hash applies

    def prepare_launch(self, loaded, launch_dir: Path, resume_from: Path | None, data_hash: str) -> LaunchSpec:
        cfg = loaded.config
        steps = cfg.max_tokens // (cfg.batch_size * cfg.model.block_size)
        config = {"out_dir": str(loaded.out_dir), "steps": steps, "save_interval": cfg.save_interval, "seed": cfg.seed,
                  "lr": cfg.lr, "micro_batch_size": cfg.micro_batch_size, "step_seconds": 0.05, "resume": str(resume_from) if resume_from else None,
                  **cfg.trainer.extra}   # trainer.extra.step_seconds sets the pace
        launch_dir.mkdir(parents=True, exist_ok=True)
        config_file = launch_dir / "toy_config.json"
        config_file.write_text(json.dumps(config, indent=1))
        # It takes notices as litgpt does under runbook (a save of the step in progress, exit 75), unless
        # trainer.extra.notice_save is false or notice_signals is empty; SIGUSR2 then stops it unsaved.
        notice = cfg.trainer.notice_signals if config.get("notice_save", True) else []
        env = {**os.environ, "PYTHONUNBUFFERED": "1", NOTICE_SIGNALS_ENV: ",".join(notice), **cfg.trainer.env}
        hyper = {"lr": cfg.lr, "micro_batch_size": cfg.micro_batch_size, "batch_size": cfg.batch_size}
        return LaunchSpec(argv=[sys.executable, str(TRAINER), str(config_file)], env=env, cwd=loaded.project_dir,
                          config_file=config_file, resume_from=resume_from, hyperparameters=hyper,
                          notice_signal=notice[0] if notice else None,
                          quit_signal="SIGUSR2" if "SIGTERM" in notice else "SIGTERM")

    def parse_line(self, line: str) -> Event | None:
        line = line.rstrip("\n")
        if (m := PROGRESS.match(line)):
            step = int(m.group(1))
            return Progress(iter_num=step, step=step, loss=float(m.group(2)), iter_time_ms=float(m.group(3)), is_step=True)
        if line == "Validating ...":   # the toy announces a validation in litgpt's words
            return ValidationStarted()
        if (m := VALIDATION.match(line)):
            return Validation(iter_num=int(m.group(1)), val_loss=float(m.group(2)))
        if (m := SAVING.match(line)):
            return CheckpointSaving(path=str(self.layout.resume_file(Path(m.group(1)))))
        if (m := RESUMING.match(line)):
            return Resumed(path=m.group(1))
        return None

    def prepare_resume(self, checkpoint, loaded, scratch_dir: Path) -> ResumePlan:
        return ResumePlan(self.layout.resume_file(checkpoint.path), f"from step {checkpoint.step}")

    def find_nonfinite(self, checkpoint, limit: int) -> list[str]:
        weights = json.loads(self.layout.resume_file(checkpoint.path).read_bytes())["weights"]
        return [f"weights[{i}]" for i, w in enumerate(weights) if not math.isfinite(w)][:limit]

    def relocate_run_dir(self, checkpoint, old_run_dir: Path, new_run_dir: Path) -> int:
        return 0   # the toy records no paths in its checkpoints

    def share_run_data(self, source_run_dir: Path, scratch_run_dir: Path) -> list[Path]:
        return []   # the toy derives nothing from its data


class FaultyToyAdapter(ToyAdapter):
    """A trainer plugin with a bug: reading the first progress line raises, so the watcher itself fails
    (what `runbook watch` exits with then is not the run's outcome, tests/runs/test_watch_events.py)."""

    def parse_line(self, line: str) -> Event | None:
        if PROGRESS.match(line.rstrip("\n")):
            raise RuntimeError("a bug in the toy adapter")
        return super().parse_line(line)
