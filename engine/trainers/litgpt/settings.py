"""litgpt's settings model: the run config's `trainer:` and `model:` sections of a litgpt run, and the
user's own litgpt YAML (`trainer.litgpt_config`) owning the values it holds (user_config.py).

Imported when a run config loads (engine/trainers/registry.py names it): it imports no torch, no litgpt.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from engine.core.config import ModelSection, TrainerSettings
from engine.core.yaml_source import SourceError, load_yaml, locate
from engine.trainers.litgpt import user_config

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig


class ModelShape(ModelSection):
    """The GPT litgpt builds (its `model_config`)."""

    name: str = "runbook-tiny"
    n_layer: int = Field(2, gt=0)
    n_head: int = Field(2, gt=0)
    n_embd: int = Field(64, gt=0)
    vocab_size: int = Field(512, gt=0)
    intermediate_size: int = Field(172, gt=0)


class LitGPTSettings(TrainerSettings):
    model_section: ClassVar[type[ModelSection]] = ModelShape

    # A str, not Literal["litgpt"]: an adapter built on litgpt's (python:<module>:<class>, e.g.
    # tests/failing_litgpt/) reads these same settings under its own kind.
    kind: str = Field("litgpt", description="litgpt: litgpt pretrain (`pip install .[litgpt]`), or an adapter built on it")
    precision: str = "32-true"
    lr_warmup_steps: int = Field(10, ge=0)
    min_lr: float = Field(1e-4, ge=0)
    eval_interval: int = Field(20, gt=0, description="optimizer steps between validations")
    eval_iters: int = Field(4, gt=0)
    litgpt_config: Path | None = Field(None, description="your litgpt pretrain YAML as the run's base (`runbook init --from-litgpt`): "
                                       "its hyperparameters, data and tokenizer are read from it and changes are written back to it")

    @classmethod
    def overlay(cls, values: dict, config_path: Path) -> dict:
        trainer = values.get("trainer") or {}
        if problem := _path_problem(trainer.get("litgpt_config"), config_path):
            raise SourceError([problem])
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
        if not self.litgpt_config:
            return updates
        owned = {k: v for k, v in updates.items() if k in user_config.OWNED}
        if owned:
            user_config.write_values(loaded.resolve(self.litgpt_config), owned)
        return {k: v for k, v in updates.items() if k not in owned}

    def source_line(self, loaded: LoadedConfig, loc: tuple) -> str | None:
        if not self.litgpt_config:
            return None
        source = user_config.source_of(loaded, loc)
        return user_config.line_of(*source) if source else None

    def write_data_dirs(self, loaded: LoadedConfig, values: dict) -> bool:
        if not self.litgpt_config:
            return False
        user_config.write_data_values(loaded.resolve(self.litgpt_config), values)
        return True

    def detach(self, tree: dict, loaded: LoadedConfig, folder: Path) -> dict:
        if not self.litgpt_config:
            return tree
        return user_config.detach(tree, loaded, Path(folder) / "litgpt" / "pretrain.yaml")


def _path_problem(value: object, config_path: Path) -> str | None:
    """PURE but for locating the key. `litgpt_config: true` (or a number, list, map, "") is the user's
    mistake, worded with file:line like pydantic's errors, not a TypeError in the overlay."""
    if value is None or (isinstance(value, str) and value.strip()):
        return None
    where = locate(load_yaml(config_path), ("trainer", "litgpt_config"))
    position = f"{config_path}:{where[0]}:{where[1]}" if where else str(config_path)
    got = "an empty string" if isinstance(value, str) else f"{type(value).__name__} {repr(value)[:60]}"
    return f"{position}: trainer.litgpt_config: expected a path to your litgpt pretrain YAML (a string), got {got}"
