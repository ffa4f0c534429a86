"""Which adapter a `trainer.kind` names.

A kind is a registered name ("litgpt") or ``python:<module>:<attribute>``: an adapter class in any
importable module, so adding a trainer needs no edit here (tests/toy_trainer/ is one such).
Registered adapters are imported only when asked for: loading a run config must not import torch.
"""

from __future__ import annotations

import importlib
from typing import Callable

from engine.trainers.base import TrainerAdapter

from engine.core.config import DEFAULT_TRAINER_KIND  # noqa: F401 - kept importable here
PYTHON_PREFIX = "python:"

_registered: dict[str, str | Callable[[], TrainerAdapter]] = {"litgpt": "engine.trainers.litgpt.adapter:LitGPTAdapter"}


class UnknownTrainer(ValueError):
    pass


def register_trainer(kind: str, factory: str | Callable[[], TrainerAdapter]) -> None:
    """Name an adapter: a factory, or "module:attribute" imported on first use."""
    if kind.startswith(PYTHON_PREFIX) or not kind:
        raise ValueError(f"'{kind}' cannot be registered: a name must not be empty or start with '{PYTHON_PREFIX}'")
    _registered[kind] = factory


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
    if kind.startswith(PYTHON_PREFIX):
        return _import(kind.removeprefix(PYTHON_PREFIX), kind)
    if kind not in _registered:
        raise UnknownTrainer(f"unknown trainer kind '{kind}': use one of {', '.join(known_kinds())}, "
                             f"or {PYTHON_PREFIX}<module>:<adapter class>")
    factory = _registered[kind]
    return _import(factory, kind) if isinstance(factory, str) else factory


def adapter_for(kind: str) -> TrainerAdapter:
    return adapter_factory(kind)()
