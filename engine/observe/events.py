"""What a trainer's output means, independent of which trainer printed it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    iter_num: int          # micro-batches seen (litgpt's iter_num)
    step: int              # optimizer steps
    loss: float            # may be nan/inf
    iter_time_ms: float
    is_step: bool          # this iteration ended with an optimizer step
    # False: `step` only counts the progress lines (another stack's line that prints no step: HF's logged dict,
    # a Keras bar); no checkpoint step may be derived from it (a rollback bound, the last healthy step).
    step_known: bool = True
    grad_norm: float | None = None   # where the trainer prints them (HF's logged dict, runbook.sdk's line)
    lr: float | None = None


@dataclass(frozen=True)
class Validation:
    iter_num: int
    val_loss: float


@dataclass(frozen=True)
class ValidationStarted:
    """A validation pass begins (litgpt prints `Validating ...`); its result line ends it."""


@dataclass(frozen=True)
class CheckpointSaving:
    path: str              # the resume file being written (CheckpointLayout.resume_file)


@dataclass(frozen=True)
class Resumed:
    path: str


@dataclass(frozen=True)
class FinalValidation:
    val_loss: float


Event = Progress | Validation | ValidationStarted | CheckpointSaving | Resumed | FinalValidation
