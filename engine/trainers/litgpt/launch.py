"""Launching litgpt `pretrain`: its generated config, staged data, environment and argv.

Measured litgpt 0.5.13 behaviour relied on: Lightning saves through a temp file in $TMPDIR and then
moves it, so a save is atomic only when TMPDIR shares the checkpoints' filesystem; pretrain.py
compiles the model, so on CPU TORCHDYNAMO_DISABLE=1 spares every start a long compile; without
PYTHONUNBUFFERED=1 the trainer's output arrives in 8 KB blocks and is lost when it is killed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
import io
import os
import shutil
import sys
from pathlib import Path

from ruamel.yaml import YAML

from engine.core.durable import atomic_write_text
from engine.core.merge import deep_merge
from engine.trainers.base import LaunchSpec
from engine.trainers.litgpt import data_cache, notice_save
from engine.checkpoints.partial_saves import trainer_tmp_dir
from engine.trainers.litgpt.nodes import group_argv
from engine.trainers.litgpt.settings_of import model_shape, trainer_settings
from engine.trainers.litgpt.user_config import launch_config

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig, RunConfig


# Device nodes a CUDA (or ROCm) torch needs: NVIDIA's, WSL2's GPU paravirtualisation, AMD's.
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg", "/dev/kfd")


def cuda_available(device_nodes: tuple[str, ...] = GPU_DEVICE_NODES) -> bool:
    # Importing torch costs the watcher ~2 s and ~200 MB for the whole run; without any GPU device
    # node torch cannot see a GPU, so it is only asked where one may be.
    if not any(os.path.exists(node) for node in device_nodes):
        return False
    import torch

    return torch.cuda.is_available()


def trainer_config(loaded: LoadedConfig, train_dir: Path, val_dir: Path, resume_from: Path | None) -> dict:
    cfg, trainer = loaded.config, trainer_settings(loaded.config)
    if trainer.litgpt_config:   # the user's own litgpt YAML is the base (runbook init --from-litgpt)

        return launch_config(loaded, resume_from)
    model = model_shape(cfg)
    litgpt_config = {
        "model_name": "pythia-14m",  # required by litgpt even with model_config; the shape below wins
        "model_config": {
            "name": model.name,
            "block_size": model.block_size,
            "n_layer": model.n_layer,
            "n_head": model.n_head,
            "n_embd": model.n_embd,
            "vocab_size": model.vocab_size,
            "padded_vocab_size": model.vocab_size,
            "mlp_class_name": "LLaMAMLP",
            "intermediate_size": model.intermediate_size,
            "norm_class_name": "RMSNorm",
            "bias": False,
            "parallel_residual": False,
            "rotary_percentage": 1.0,
        },
        "out_dir": str(loaded.out_dir),
        "precision": trainer.precision,
        "resume": str(resume_from) if resume_from else False,
        "data": {
            "class_path": "litgpt.data.TextFiles",
            "init_args": {
                "train_data_path": str(train_dir),
                "val_data_path": str(val_dir),
                "num_workers": cfg.trainer.num_workers,
                "seed": cfg.seed,
            },
        },
        "tokenizer_dir": str(loaded.data_path("tokenizer_dir")),
        "train": {
            "save_interval": cfg.save_interval,
            "log_interval": 1,
            "global_batch_size": cfg.batch_size,
            "micro_batch_size": cfg.micro_batch_size,
            "lr_warmup_steps": trainer.lr_warmup_steps,
            "max_tokens": cfg.max_tokens,
            "max_seq_length": model.block_size,
            "max_norm": 1.0,
            # litgpt's cosine decays from lr to min_lr; with an lr cut below min_lr it would climb
            # back up to min_lr instead, undoing the cut. The floor follows the cut.
            "min_lr": min(trainer.min_lr, cfg.lr),
        },
        "eval": {
            "interval": trainer.eval_interval,
            "max_iters": trainer.eval_iters,
            "initial_validation": False,
            "final_validation": True,
        },
        "optimizer": {
            "class_path": "torch.optim.AdamW",
            "init_args": {"lr": cfg.lr, "weight_decay": 0.0, "betas": [0.9, 0.95]},
        },
        "devices": cfg.trainer.devices,
        "num_nodes": cfg.trainer.num_nodes,
        "seed": cfg.seed,
        "logger_name": "csv",
    }
    return deep_merge(litgpt_config, cfg.trainer.extra)

def place_cache(loaded: LoadedConfig, config: dict, data_hash: str) -> tuple[Path | None, int]:
    """The TextFiles cache folder this config reads (its paths set in config), and the block size."""
    block_size = config["train"].get("max_seq_length") or loaded.config.model.block_size
    return data_cache.place(config, loaded.run_dir, data_hash, loaded.data_path("tokenizer_dir"), block_size), block_size


def prepare_launch(loaded: LoadedConfig, launch_dir: Path, resume_from: Path | None, data_hash: str) -> LaunchSpec:
    cfg = loaded.config
    config = trainer_config(loaded, Path(), Path(), resume_from)   # the data paths are the cache's, below
    cache, block_size = place_cache(loaded, config, data_hash)
    train_src, val_src, tokenizer_dir = (loaded.data_path(n) for n in ("train_dir", "val_dir", "tokenizer_dir"))
    launch_dir.mkdir(parents=True, exist_ok=True)
    config_file = launch_dir / "litgpt_pretrain.yaml"
    buffer = io.StringIO()
    writer = YAML(typ="safe", pure=True)
    # litgpt reads this with PyYAML (YAML 1.1): written as 1.2, 1e-05 would come back a string and 'yes' a bool.
    writer.version = (1, 1)
    writer.dump(config, buffer)
    atomic_write_text(config_file, buffer.getvalue())
    reached = launched_hyperparameters(config_file)
    if missed := hyperparameters_missed(cfg, reached):
        raise HyperparametersNotReached(
            f"the trainer config {config_file} would start litgpt with {missed}, not the run config's values: a "
            "change would never reach the trainer (a relaunch would train as before). Not launching")

    env = launch_env(loaded)
    notice = cfg.trainer.notice_signals
    argv = entry_argv(sys.executable, config_file)
    if cfg.trainer.num_nodes > 1:   # one torchrun agent per node, started by the node group (nodes.py)

        argv = group_argv(sys.executable, cfg.trainer.num_nodes, cfg.trainer.devices) + argv
    if cache is not None and not data_cache.is_complete(cache):   # built by the trainer process first
        argv = data_cache.preprocess_argv(sys.executable, cache, train_src, val_src, tokenizer_dir, block_size) + argv
    return LaunchSpec(
        argv=argv,
        env=env,
        cwd=loaded.project_dir,
        config_file=config_file,
        resume_from=resume_from,
        hyperparameters=reached,   # what litgpt reads from the file, checked against the run config
        memory_limit_bytes=cfg.trainer.memory_limit_mb * 1024 * 1024 if cfg.trainer.memory_limit_mb else None,
        notice_signal=notice[0] if notice else None,
        # SIGUSR2 has no handler in entry.py: its default action ends the trainer at once, like an
        # unhandled SIGTERM did, so a recovery's stop saves nothing (a save of a spiking step would be resumed).
        quit_signal="SIGUSR2" if "SIGTERM" in notice else "SIGTERM",
        # a spare is one pre-imported rank; several nodes start theirs through torchrun
        warm_spare_dir=loaded.run_dir / "spare" if cfg.trainer.warm_spare and cfg.trainer.num_nodes == 1 else None,
        warm_imports=WARM_IMPORTS,
        training_marker="Epoch ",   # litgpt's progress line (log_lines.py)
    )



class HyperparametersNotReached(RuntimeError):
    """The generated trainer config does not carry the run config's hyperparameters: the launch is refused
    (in a recovery, its action fails and the incident escalates) instead of restarting at the old values."""


# runbook key -> where litgpt's pretrain reads it in the trainer config.
LAUNCH_PLACES = {"micro_batch_size": ("train", "micro_batch_size"), "batch_size": ("train", "global_batch_size"),
                 "lr": ("optimizer", "init_args", "lr"), "save_interval": ("train", "save_interval"),
                 "max_tokens": ("train", "max_tokens")}


def launched_hyperparameters(config_file: Path) -> dict:
    """The hyperparameters litgpt will read from `config_file`, parsed as it parses it (PyYAML, YAML 1.1):
    a value the file lacks is None."""
    import yaml as pyyaml

    tree = pyyaml.safe_load(config_file.read_text(encoding="utf-8"))
    out = {}
    for key, place in LAUNCH_PLACES.items():
        node = tree
        for part in place:
            node = node.get(part) if isinstance(node, dict) else None
        out[key] = node
    return out


def hyperparameters_missed(cfg: RunConfig, reached: dict) -> str:
    """PURE. 'lr None (run config: 0.003), ...' for each hyperparameter the launch would not get; '' when all match."""
    missed = [f"{key} {reached.get(key)!r} (run config: {getattr(cfg, key)!r})" for key in LAUNCH_PLACES
              if not _same(reached.get(key), getattr(cfg, key))]
    return ", ".join(missed)


def _same(got: object, want: int | float) -> bool:
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return False
    return got == want if isinstance(want, int) else abs(got - want) <= 1e-12 * max(1.0, abs(want))


def launch_env(loaded: LoadedConfig) -> dict[str, str]:
    """The trainer's environment (before the watcher adds its own RUNBOOK_* variables)."""
    cfg = loaded.config
    device = cfg.trainer.device
    if device == "auto":
        device = "cuda" if cuda_available() else "cpu"
    # Lightning's save writes a mkstemp() file in TMPDIR, then renames it onto lit_model.pth: this
    # folder shares the checkpoints' filesystem (an atomic rename) and is ours alone by name.

    tmp_dir = trainer_tmp_dir(loaded.out_dir)
    tmp_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # One experiment-tracker run across every relaunch (the seed's WANDB_RESUME=allow); the id is the
    # run folder's, added to every trainer's environment by engine/process/trainer_env.py.
    env.update({"PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp_dir), "WANDB_RESUME": "allow"})
    if device == "cpu":
        env["TORCHDYNAMO_DISABLE"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    env[notice_save.NOTICE_SIGNALS_ENV] = ",".join(cfg.trainer.notice_signals)   # entry.py saves on these (notice_save.py)
    env.update(cfg.trainer.env)
    return env


def spare_spec(loaded: LoadedConfig) -> LaunchSpec | None:
    """What a launch of this run will look like before its files exist, for a warm spare started while
    the watcher is still starting up (engine/watch/startup.py): prepare_launch's interpreter, environment and
    process settings (a spare that differs is only discarded: warm_spare.unusable says why)."""
    cfg = loaded.config
    notice = cfg.trainer.notice_signals
    if not cfg.trainer.warm_spare or getattr(cfg.trainer, "num_nodes", 1) != 1:   # several nodes: torchrun starts them
        return None
    return LaunchSpec(
        argv=entry_argv(sys.executable, Path("-")), env=launch_env(loaded), cwd=loaded.project_dir,
        config_file=Path("-"), resume_from=None,
        memory_limit_bytes=cfg.trainer.memory_limit_mb * 1024 * 1024 if cfg.trainer.memory_limit_mb else None,
        notice_signal=notice[0] if notice else None, quit_signal="SIGUSR2" if "SIGTERM" in notice else "SIGTERM",
        warm_spare_dir=loaded.run_dir / "spare", warm_imports=WARM_IMPORTS, training_marker="Epoch ")


ENTRY_MODULE = "engine.trainers.litgpt.entry"
# What a warm spare (trainer.warm_spare, engine/process/warm_spare.py) imports ahead: most of a start's seconds.
WARM_IMPORTS = ("engine.trainers.litgpt.lean_imports", "torch", "lightning", "litgpt.pretrain", "jsonargparse", "litgpt.data", "litdata",
                "engine.trainers.litgpt.notice_save")


def entry_argv(python: str, config_file: Path) -> list[str]:
    """PURE. litgpt's own `pretrain --config FILE`, run through runbook's entry module (entry.py)."""
    return [python, "-m", ENTRY_MODULE, "pretrain", "--config", str(config_file)]


def _bin_path() -> str:
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


INSTALL_HINT = ("run `bash scripts/setup.sh` (README.md), or `pip install runbook-pretrain[litgpt]` (from a checkout: "
                "`pip install .[litgpt]`) into the Python that runs runbook")


def is_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("litgpt") is not None and shutil.which("litgpt", path=_bin_path()) is not None
