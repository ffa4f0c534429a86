"""Loading a run config with its trainer's side: the kind must name an adapter, and a trainer's own
config file (litgpt's YAML, `trainer.litgpt_config`) owns the values it holds. engine/core/config.py
knows no trainer; this seam gives it what it needs, so every caller loads through here."""

from __future__ import annotations

from pathlib import Path

from engine.core.config import DEFAULT_TRAINER_KIND, LoadedConfig
from engine.core.config import load_config as load_without_trainer
from engine.core.yaml_source import SourceError, load_yaml, locate
from engine.trainers.registry import adapter_factory


def _type_problem(values: dict, config_path: Path) -> str | None:
    """PURE but for locating the key. trainer.litgpt_config must be a path (a string) and trainer.extra a
    mapping before the overlay uses them: `litgpt_config: true` (or a number, list, map) is the user's
    mistake, worded with file:line like pydantic's errors, not a TypeError in every command."""
    trainer = values.get("trainer")
    if not isinstance(trainer, dict):
        return None   # pydantic says what trainer must be
    checks = (("litgpt_config", str, "a path to your litgpt pretrain YAML (a string)"),
              ("extra", dict, "a mapping of litgpt keys to values"))
    for key, kind, expected in checks:
        value = trainer.get(key)
        if value is None or (isinstance(value, kind) and (kind is not str or value.strip())):
            continue
        where = locate(load_yaml(config_path), ("trainer", key))
        position = f"{config_path}:{where[0]}:{where[1]}" if where else str(config_path)
        got = "an empty string" if isinstance(value, str) else f"{type(value).__name__} {repr(value)[:60]}"
        return f"{position}: trainer.{key}: expected {expected}, got {got}"
    return None


class TrainerSeam:
    def check_kind(self, kind: str) -> None:
        adapter_factory(kind)   # UnknownTrainer (a ValueError) says why there is no such trainer

    def overlay(self, values: dict, config_path: Path) -> dict:
        if problem := _type_problem(values, config_path):
            raise SourceError([problem])
        trainer = values.get("trainer")
        if not isinstance(trainer, dict) or trainer.get("kind", DEFAULT_TRAINER_KIND) != "litgpt":
            return values
        from engine.trainers.litgpt import user_config   # litgpt's side, only for litgpt runs

        litgpt_path = None
        if trainer.get("litgpt_config"):
            litgpt_path = Path(trainer["litgpt_config"])
            litgpt_path = litgpt_path if litgpt_path.is_absolute() else config_path.resolve().parent.parent / litgpt_path
            if not litgpt_path.is_file():
                raise SourceError([f"{config_path}: trainer.litgpt_config: no file {litgpt_path}"])
        if problems := user_config.extra_problems(trainer.get("extra") or {}, config_path, litgpt_path):
            raise SourceError(problems)
        return user_config.overlay(values, litgpt_path, config_path) if litgpt_path else values

    def write_owned(self, loaded: LoadedConfig, updates: dict) -> dict:
        if not loaded.config.trainer.litgpt_config:
            return updates
        from engine.trainers.litgpt import user_config

        owned = {k: v for k, v in updates.items() if k in user_config.OWNED}
        if owned:
            user_config.write_values(loaded.resolve(loaded.config.trainer.litgpt_config), owned)
        return {k: v for k, v in updates.items() if k not in owned}

    def source_line(self, loaded: LoadedConfig, loc: tuple) -> str | None:
        if not loaded.config.trainer.litgpt_config:
            return None
        from engine.trainers.litgpt import user_config

        source = user_config.source_of(loaded, loc)
        return user_config.line_of(*source) if source else None

    def write_data_dirs(self, loaded: LoadedConfig, values: dict) -> bool:
        if not loaded.config.trainer.litgpt_config:
            return False
        from engine.trainers.litgpt import user_config

        user_config.write_data_values(loaded.resolve(loaded.config.trainer.litgpt_config), values)
        return True


SEAM = TrainerSeam()


def load_config(path: Path) -> LoadedConfig:
    """The run config at `path`: validated with file:line errors, with its trainer's overlay."""
    return load_without_trainer(path, SEAM)
