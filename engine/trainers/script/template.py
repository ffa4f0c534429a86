"""`{name}` templates in a trainer's argv: only the names below, so a typo is a config error
at load, not an argument the script chokes on mid-run. `{{` and `}}` are literal braces. check and
render are pure; values_of reads the loaded run config."""

from __future__ import annotations

from typing import TYPE_CHECKING
import re
import sys

from engine.trainers.base import accumulation
from engine.trainers.script.world import world_size

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig, RunConfig

NAMES = ("python", "out_dir", "resume", "micro_batch_size", "batch_size", "grad_accum", "lr", "max_steps",
         "save_interval", "seed", "block_size", "train_dir", "val_dir", "device", "devices", "num_nodes", "world_size")
_FIELD = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")


def check(text: str) -> None:
    for m in _FIELD.finditer(text):
        if m.group(0) not in ("{{", "}}") and m.group(1) not in NAMES:
            raise ValueError(f"unknown template field {{{m.group(1)}}} in {text!r}; use {', '.join(NAMES)}")


def render(text: str, values: dict) -> str:
    def one(m: re.Match) -> str:
        if m.group(0) in ("{{", "}}"):
            return m.group(0)[0]
        return str(values[m.group(1)])
    return _FIELD.sub(one, text)


def launcher_world(config: RunConfig, launcher: list[str] | None) -> int:
    """Ranks sharing the global batch, as the launcher's flags say (engine/trainers/script/world.py)."""
    devices, nodes = config.trainer.devices, config.trainer.num_nodes
    # `launcher` may be a script's whole command: its other names ({out_dir}, {max_steps}) are no launcher's
    # flags, and are not known before the world size (a KeyError failed every kind-script launch).
    early = {**dict.fromkeys(NAMES, ""), "python": sys.executable, "devices": devices, "num_nodes": nodes}
    return world_size([render(item, early) for item in (launcher or [])], devices, nodes)


def values_of(loaded: LoadedConfig, resume: str | None, launcher: list[str] | None = None) -> dict:
    """The template's values for one launch of the run `loaded` describes. `launcher`: the argv's launcher part
    (torchrun ...), whose flags say how many ranks share the global batch (engine/trainers/script/world.py)."""
    cfg = loaded.config
    values = {"python": sys.executable, "devices": cfg.trainer.devices, "num_nodes": cfg.trainer.num_nodes}
    world = launcher_world(cfg, launcher)
    return {**values, "out_dir": loaded.out_dir, "resume": resume or "",
            "micro_batch_size": cfg.micro_batch_size, "batch_size": cfg.batch_size, "world_size": world,
            "grad_accum": accumulation(cfg.batch_size, cfg.micro_batch_size, world), "lr": repr(float(cfg.lr)),
            "max_steps": cfg.max_tokens // (cfg.batch_size * cfg.model.block_size),
            "save_interval": cfg.save_interval, "seed": cfg.seed, "block_size": cfg.model.block_size,
            "train_dir": loaded.resolve(cfg.data.train_dir), "val_dir": loaded.resolve(cfg.data.val_dir),
            "device": cfg.trainer.device}
