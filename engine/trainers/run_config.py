"""Loading a run config with its trainer's side: the kind must name an adapter, `trainer:` (and
`model:`) are validated by that trainer's settings model, and a trainer's own config file (litgpt's
YAML) owns the values it holds, through the settings model's hooks. engine/core/config.py knows no
trainer; this seam gives it what it needs, so every caller loads through here."""

from __future__ import annotations

from pathlib import Path

from engine.core.config import DEFAULT_TRAINER_KIND as CORE_DEFAULT_KIND
from engine.core.config import LoadedConfig, RunConfig, TrainerSettings, run_config_type
from engine.core.config import load_config as load_without_trainer
from engine.core.yaml_source import SourceError, load_yaml, locate
from engine.trainers.registry import adapter_factory, resolved_kind, settings_model_for


def _extra_problem(values: dict, config_path: Path) -> str | None:
    """PURE but for locating the key. trainer.extra must be a mapping before a trainer's overlay reads
    it: `extra: 5` is the user's mistake, worded with file:line like pydantic's errors, not a TypeError."""
    trainer = values.get("trainer")
    extra = trainer.get("extra") if isinstance(trainer, dict) else None
    if extra is None or isinstance(extra, dict):
        return None
    where = locate(load_yaml(config_path), ("trainer", "extra"))
    position = f"{config_path}:{where[0]}:{where[1]}" if where else str(config_path)
    return f"{position}: trainer.extra: expected a mapping of trainer config keys to values, got " \
           f"{type(extra).__name__} {repr(extra)[:60]}"


def with_kind(values: dict) -> dict:
    """PURE. The values with the trainer's kind written in (a config without one runs the default
    trainer), so that records and `runbook status` name the trainer, not a placeholder."""
    trainer = values.get("trainer", {})
    if not isinstance(trainer, dict):
        return values   # pydantic says what trainer must be
    kind = trainer.get("kind", CORE_DEFAULT_KIND)
    return {**values, "trainer": {**trainer, "kind": resolved_kind(kind) if isinstance(kind, str) else kind}}


class TrainerSeam:
    def check_kind(self, kind: str) -> None:
        adapter_factory(kind)   # UnknownTrainer (a ValueError) says why there is no such trainer

    def settings_model(self, kind: str) -> type[TrainerSettings]:
        return settings_model_for(kind)

    def overlay(self, values: dict, config_path: Path) -> dict:
        if problem := _extra_problem(values, config_path):
            raise SourceError([problem])
        values = with_kind(values)
        try:
            settings = settings_model_for(values.get("trainer", {}).get("kind"))
        except (AttributeError, TypeError, ValueError):
            return values   # the kind's own validator says why there is no such trainer, with file:line
        return settings.overlay(values, config_path)


SEAM = TrainerSeam()


def load_config(path: Path) -> LoadedConfig:
    """The run config at `path`: validated with file:line errors, by its trainer's settings model."""
    return load_without_trainer(path, SEAM)


def run_config_of(values: dict) -> RunConfig:
    """Run config values in memory (an incident record's config_before), validated by their trainer's
    settings model (a pydantic ValidationError when they do not validate)."""
    values = with_kind(values)
    trainer = values.get("trainer") or {}
    try:
        model = run_config_type(settings_model_for(trainer["kind"]))
    except (KeyError, TypeError, ValueError):
        model = RunConfig
    return model.model_validate(values, context={"seam": SEAM})
