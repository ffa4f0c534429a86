"""Trainer adapters: everything runbook knows about one trainer lives in ``engine/trainers/<name>/``,
behind `TrainerAdapter` and its `CheckpointLayout` (base.py); `adapter_for` finds it (registry.py)."""

from engine.trainers.base import CheckpointLayout, LaunchSpec, ResumePlan, TrainerAdapter
from engine.trainers.registry import (
    DEFAULT_TRAINER_KIND,
    UnknownTrainer,
    adapter_factory,
    adapter_for,
    known_kinds,
    register_trainer,
)

__all__ = ["CheckpointLayout", "LaunchSpec", "ResumePlan", "TrainerAdapter", "DEFAULT_TRAINER_KIND", "UnknownTrainer",
           "adapter_factory", "adapter_for", "known_kinds", "register_trainer"]
