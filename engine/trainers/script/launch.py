"""One launch of a script-like trainer (a plain script, or an HF Trainer script): its argv from the
templates, its environment (the notice signals, offline Hugging Face, the data folders) and its spec."""

from __future__ import annotations

from typing import TYPE_CHECKING
import json
import os
from pathlib import Path

from engine.process.launch_spec import LaunchSpec
from engine.trainers.script import template

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig

NOTICE_SIGNALS_ENV = "RUNBOOK_NOTICE_SIGNALS"   # read by runbook/sdk.py's watch_notice()


def argv_of(command: list[str], resume_args: list[str], values: dict) -> list[str]:
    """PURE. The command's argv, with the resume arguments appended only when there is a file to resume."""
    items = command + (resume_args if values.get("resume") else [])
    return [template.render(item, values) for item in items]


def trainer_env(loaded: LoadedConfig) -> dict[str, str]:
    cfg = loaded.config
    return {**os.environ, "PYTHONUNBUFFERED": "1",
            # Nothing is downloaded at run time: a model, a tokenizer, a dataset must be local.
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            NOTICE_SIGNALS_ENV: ",".join(cfg.trainer.notice_signals),
            "RUNBOOK_OUT_DIR": str(loaded.out_dir),
            "RUNBOOK_TRAIN_DIR": str(loaded.resolve(cfg.data.train_dir)),
            "RUNBOOK_VAL_DIR": str(loaded.resolve(cfg.data.val_dir)),
            **cfg.trainer.env}


def launch_spec(loaded: LoadedConfig, launch_dir: Path, resume_from: Path | None, argv: list[str]) -> LaunchSpec:
    """The spec, with the launch written down (launch.json: argv and the hyperparameters it carries)."""
    cfg = loaded.config
    launch_dir.mkdir(parents=True, exist_ok=True)
    hyper = {"lr": cfg.lr, "micro_batch_size": cfg.micro_batch_size, "batch_size": cfg.batch_size}
    config_file = launch_dir / "launch.json"
    config_file.write_text(json.dumps({"argv": argv, "hyperparameters": hyper}, indent=1))
    notice = cfg.trainer.notice_signals
    return LaunchSpec(argv=argv, env=trainer_env(loaded), cwd=loaded.project_dir, config_file=config_file,
                      resume_from=resume_from, hyperparameters=hyper,
                      memory_limit_bytes=cfg.trainer.memory_limit_mb * 1024 * 1024 if cfg.trainer.memory_limit_mb else None,
                      notice_signal=notice[0] if notice else None,
                      quit_signal="SIGUSR2" if "SIGTERM" in notice else "SIGTERM")
