"""`trainer:` of a Hugging Face Trainer script (kind `hf-trainer`). Imported when a run config loads: no torch."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from engine.core.config import TrainerSettings
from engine.trainers.script import template

# TrainingArguments runbook sets from the run config on every launch: the run config owns them.
MANAGED = ("output_dir", "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "max_steps",
           "save_steps", "save_strategy", "logging_steps", "seed", "resume_from_checkpoint", "logging_nan_inf_filter",
           "save_total_limit", "report_to", "use_cpu", "disable_tqdm")


class HFTrainerSettings(TrainerSettings):
    script: Path = Field(Path("train.py"), description="your training script (relative to the project folder): it "
                         "parses TrainingArguments (HfArgumentParser) and adds runbook.hf_callback.RunbookCallback")
    launcher: list[str] = Field(default_factory=list, description="what starts the script's ranks, each item a template "
                                "(e.g. [\"{python}\", \"-m\", \"torch.distributed.run\", \"--standalone\", "
                                "\"--nproc-per-node\", \"{devices}\"] or [\"accelerate\", \"launch\", "
                                "\"--num_processes\", \"{devices}\"]); empty: `python`, or torchrun with "
                                "trainer.devices ranks when devices > 1")
    args: list[str] = Field(default_factory=list, description="more arguments for the script, each a template "
                            "(the names of trainer.command for kind script)")

    @field_validator("launcher")
    @classmethod
    def _launcher(cls, items: list[str]) -> list[str]:
        for item in items:
            template.check(item)
        return items

    @field_validator("args")
    @classmethod
    def _args(cls, items: list[str]) -> list[str]:
        for item in items:
            template.check(item)
            name = item.removeprefix("--").split("=", 1)[0].replace("-", "_")
            if item.startswith("--") and name in MANAGED:
                raise ValueError(f"{item!r} is set by runbook from the run config (lr, micro_batch_size, batch_size, "
                                 "save_interval, max_tokens, seed, out_dir): set it there instead")
        return items
