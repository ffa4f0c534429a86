"""Which adapter a `trainer.kind` names.

A kind is a registered name ("litgpt") or ``python:<module>:<attribute>``: an adapter class in any
importable module, so adding a trainer needs no edit here (tests/toy_trainer/ is one such).
Registered adapters are imported only when asked for: loading a run config must not import torch.

Each trainer has a settings model (a TrainerSettings subclass, engine/core/config.py) that validates
its run config's `trainer:` section (and `model:`, by its model_section): a registered kind names it
beside its adapter, so that loading a config imports only the settings module; a python: kind's
adapter class names it in its `settings_model` attribute. Without one, the core TrainerSettings.
"""

from __future__ import annotations

import importlib
from typing import Callable

from engine.core.config import DEFAULT_TRAINER_KIND as CORE_DEFAULT_KIND
from engine.core.config import TrainerSettings
from engine.trainers.base import TrainerAdapter

PYTHON_PREFIX = "python:"
DEFAULT_TRAINER_KIND = "litgpt"   # the trainer of a run config that names none (`pip install .[litgpt]`)

_registered: dict[str, str | Callable[[], TrainerAdapter]] = {"litgpt": "engine.trainers.litgpt.adapter:LitGPTAdapter",
                                                              "hf-trainer": "engine.trainers.hf.adapter:HFTrainerAdapter",
                                                              "script": "engine.trainers.script.adapter:ScriptAdapter"}
# kind -> "module:class" of its settings model, imported without its adapter (nor torch)
_settings: dict[str, str | type[TrainerSettings]] = {"litgpt": "engine.trainers.litgpt.settings:LitGPTSettings",
                                                   "hf-trainer": "engine.trainers.hf.settings:HFTrainerSettings",
                                                   "script": "engine.trainers.script.settings:ScriptSettings"}


class UnknownTrainer(ValueError):
    pass


def register_trainer(kind: str, factory: str | Callable[[], TrainerAdapter],
                     settings: str | type[TrainerSettings] | None = None) -> None:
    """Name an adapter: a factory, or "module:attribute" imported on first use; and its settings model
    (a class or "module:class"; default: the factory's `settings_model` attribute, else TrainerSettings)."""
    if kind.startswith(PYTHON_PREFIX) or not kind or kind == CORE_DEFAULT_KIND:
        raise ValueError(f"'{kind}' cannot be registered: a name must not be empty, '{CORE_DEFAULT_KIND}' "
                         f"or start with '{PYTHON_PREFIX}'")
    _registered[kind] = factory
    _settings.pop(kind, None)
    if settings is not None:
        _settings[kind] = settings


def resolved_kind(kind: str) -> str:
    """PURE. The trainer a kind names: the core's placeholder for "none given" is the default trainer."""
    return DEFAULT_TRAINER_KIND if kind == CORE_DEFAULT_KIND else kind


def known_kinds() -> list[str]:
    return sorted(_registered)


def _import(target: str, kind: str) -> Callable[[], TrainerAdapter]:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise UnknownTrainer(f"trainer kind '{kind}': write it as {PYTHON_PREFIX}<module>:<adapter class>")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UnknownTrainer(f"trainer kind '{kind}': cannot import {module_name} ({error})") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise UnknownTrainer(f"trainer kind '{kind}': {module_name} has no {attribute}") from None


def adapter_factory(kind: str) -> Callable[[], TrainerAdapter]:
    """The adapter class (or factory) of a kind; UnknownTrainer says why there is none."""
    kind = resolved_kind(kind)
    if kind.startswith(PYTHON_PREFIX):
        return _import(kind.removeprefix(PYTHON_PREFIX), kind)
    if kind not in _registered:
        raise UnknownTrainer(f"unknown trainer kind '{kind}': use one of {', '.join(known_kinds())}, "
                             f"or {PYTHON_PREFIX}<module>:<adapter class>")
    factory = _registered[kind]
    return _import(factory, kind) if isinstance(factory, str) else factory


def adapter_for(kind: str) -> TrainerAdapter:
    return adapter_factory(kind)()


def settings_model_for(kind: str) -> type[TrainerSettings]:
    """The settings model of a kind's trainer (see the module docstring); UnknownTrainer says why
    there is no such trainer or its model is not a TrainerSettings."""
    kind = resolved_kind(kind)
    target = _settings.get(kind)
    if target is None:
        target = getattr(adapter_factory(kind), "settings_model", TrainerSettings)
    model = _import(target, kind) if isinstance(target, str) else target
    if not (isinstance(model, type) and issubclass(model, TrainerSettings)):
        raise UnknownTrainer(f"trainer kind '{kind}': its settings model {model!r} is not a TrainerSettings "
                             "(engine/core/config.py)")
    return model
