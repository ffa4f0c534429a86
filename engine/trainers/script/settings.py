"""`trainer:` of a plain training script (kind `script`): its command. Its checkpoints are the contract's
(engine/trainers/script/adapter.py): <out_dir>/step-<6 digits>/state.pt, and <out_dir>/final/state.pt.

Imported when a run config loads: no torch here."""

from __future__ import annotations

from pydantic import Field, field_validator

from engine.core.config import TrainerSettings
from engine.trainers.script import template


class ScriptSettings(TrainerSettings):
    command: list[str] = Field(..., min_length=1, description="argv of one launch, each item a template: "
                               + ", ".join("{" + n + "}" for n in template.NAMES))
    resume_args: list[str] = Field(["--resume", "{resume}"], description="appended when resuming; {resume} is the "
                                   "checkpoint's resume file")
    weights_key: str | None = Field("model", description="the key of the model's state dict inside a torch.save "
                                    "resume file (None: the file is the state dict)")

    @field_validator("command", "resume_args")
    @classmethod
    def _templates(cls, items: list[str]) -> list[str]:
        for item in items:
            template.check(item)   # a ValueError names the unknown {name}: file:line through pydantic
        return items
