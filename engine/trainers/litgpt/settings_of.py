"""The run config's `trainer:` and `model:` as litgpt's settings model validated them.

RunConfig declares the core TrainerSettings and ModelSection; a litgpt run's config is built by
run_config_type(LitGPTSettings) (engine/trainers/registry.py), so its sections are litgpt's subclasses.
These say so to the type checker, without importing settings.py at run time (it imports user_config.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from engine.core.config import RunConfig
    from engine.trainers.litgpt.settings import LitGPTSettings, ModelShape


def trainer_settings(config: RunConfig) -> LitGPTSettings:
    return cast("LitGPTSettings", config.trainer)


def model_shape(config: RunConfig) -> ModelShape:
    return cast("ModelShape", config.model)
