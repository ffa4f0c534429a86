"""PURE. What a remedy's environment change may not do, and which changes are only for a diagnosis.

Known crashes: a variable value that is known to kill the trainer where it runs is never passed on, for
every trainer kind. TORCH_DISTRIBUTED_DEBUG=DETAIL (collective-timeout's diagnosis) makes every rank of
a DDP group over gloo die of SIGSEGV before its first step (torch 2.13, measured with and without runbook:
../shared/FINDINGS.md); INFO works. On a GPU (NCCL) DETAIL stays.

Diagnostic variables (NCCL_DEBUG, TORCH_DISTRIBUTED_DEBUG, set with `set_env: {diagnostic: true}`) are
for the launch that follows the incident: once it has trained watch.diagnostics_healthy_steps steps
they are lifted, so the rest of the run does not pay their logging.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class KnownCrash:
    name: str
    value: str
    safe_value: str
    why: str


CPU_CRASHES = (
    KnownCrash("TORCH_DISTRIBUTED_DEBUG", "DETAIL", "INFO",
               "TORCH_DISTRIBUTED_DEBUG=DETAIL kills every DDP rank over gloo (CPU) with SIGSEGV at start-up (torch 2.13)"),
)


def on_gpu(device: str, probe: str = "/proc/driver/nvidia/version") -> bool:
    """The trainer's device: `cpu` is the CPU; `auto` is a GPU where the NVIDIA driver is loaded."""
    if device == "cpu":
        return False
    return device != "auto" or os.path.exists(probe)


def without_known_crashes(env: dict[str, str], gpu: bool) -> tuple[dict[str, str], list[str]]:
    """PURE. `env` with every value known to crash here replaced by its safe one, and a sentence for each."""
    if gpu:
        return env, []
    fixed, notes = dict(env), []
    for crash in CPU_CRASHES:
        if fixed.get(crash.name, "").upper() == crash.value:
            fixed[crash.name] = crash.safe_value
            notes.append(f"{crash.name}={crash.safe_value} instead of {crash.value}: {crash.why}")
    return fixed, notes
