"""Trainer adapters: everything runbook knows about one trainer lives behind `TrainerAdapter`."""

from engine.trainers.base import LaunchSpec, TrainerAdapter
from engine.trainers.litgpt import LitGPTAdapter


def adapter_for(kind: str) -> TrainerAdapter:
    adapters = {"litgpt": LitGPTAdapter}
    return adapters[kind]()


__all__ = ["LaunchSpec", "TrainerAdapter", "LitGPTAdapter", "adapter_for"]
