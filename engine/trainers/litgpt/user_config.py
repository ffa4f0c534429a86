"""The user's own litgpt pretrain YAML as the base of a run (`trainer.litgpt_config`).

One source of truth: the hyperparameters runbook reads and changes (micro_batch_size, batch_size,
lr, save_interval, max_tokens, seed, out_dir, the TextFiles folders and the tokenizer) live in the
litgpt YAML. They are read from it when the run config loads (overlay), written back to it, comments
kept, when a recovery changes one (write_values), and the launch config is the user's YAML with
only what supervision needs set on top (launch_config). Relative paths in it are relative to the
project folder, where litgpt runs.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from engine.durable import atomic_write_text
from engine.merge import deep_merge
from engine.yaml_source import SourceError, load_yaml, plain, round_trip_yaml

TEXT_FILES = "litgpt.data.TextFiles"
# runbook key -> where litgpt keeps it.
OWNED = {
    "micro_batch_size": ("train", "micro_batch_size"),
    "batch_size": ("train", "global_batch_size"),
    "lr": ("optimizer", "init_args", "lr"),
    "save_interval": ("train", "save_interval"),
    "max_tokens": ("train", "max_tokens"),
    "seed": ("seed",),
    "out_dir": ("out_dir",),
}
DATA_OWNED = {"train_dir": ("data", "init_args", "train_data_path"), "val_dir": ("data", "init_args", "val_data_path"),
              "tokenizer_dir": ("tokenizer_dir",)}


def _get(tree: Any, keys: tuple) -> Any:
    for key in keys:
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def read(path: Path) -> dict:
    tree = load_yaml(path)
    if not isinstance(tree, dict):
        raise SourceError([f"{path}:1:1: a litgpt pretrain config must be a mapping of keys to values"])
    return plain(tree)


def block_size(litgpt: dict) -> int:
    """The sequence length litgpt trains at: train.max_seq_length, else the model's block size."""
    if seq := _get(litgpt, ("train", "max_seq_length")):
        return int(seq)
    if isinstance(litgpt.get("model_config"), dict) and "block_size" in litgpt["model_config"]:
        return int(litgpt["model_config"]["block_size"])
    from litgpt.config import Config   # config only: no weights are read or fetched

    return Config.from_name(litgpt["model_name"], **(litgpt.get("model_config") or {})).block_size


def effective(litgpt: dict, extra: dict) -> dict:
    """PURE. What litgpt receives before runbook's own settings: the user's YAML, trainer.extra on top."""
    return deep_merge(litgpt, extra or {})


def overlay(tree: dict, litgpt_path: Path, config_path: Path) -> dict:
    """The run config's tree with the keys the litgpt YAML owns taken from it (a SourceError when the
    run config sets one too, or the YAML lacks one runbook needs)."""
    litgpt = effective(read(litgpt_path), (tree.get("trainer") or {}).get("extra") or {})
    if (data := litgpt.get("data")) is not None and not (isinstance(data, dict) and data.get("class_path") == TEXT_FILES):
        raise SourceError([f"{litgpt_path}: data must be {TEXT_FILES} (class_path/init_args) with train_data_path and "
                           "val_data_path for now; other data modules are not supported by runbook yet"])
    out = dict(tree)
    for key, where in OWNED.items():
        if key in tree:
            raise SourceError([f"{config_path}: {key} is set both here and in {litgpt_path} "
                               f"({'.'.join(where)}); keep it only in the litgpt config"])
        value = _get(litgpt, where)
        if value is None and key in ("micro_batch_size", "batch_size", "lr", "max_tokens"):
            raise SourceError([f"{litgpt_path}: {'.'.join(where)} is not set; runbook needs it to plan and recover the run"])
        if value is not None:
            out[key] = value
    data_section = dict(tree.get("data") or {})
    for key, where in DATA_OWNED.items():
        value = _get(litgpt, where)
        if value is None:
            raise SourceError([f"{litgpt_path}: {'.'.join(where)} is not set; runbook trains from .txt folders and a tokenizer"])
        data_section[key] = value
    data_section["make_default"] = False
    out["data"] = data_section
    out["model"] = {**(tree.get("model") or {}), "block_size": block_size(litgpt)}
    return out


def write_values(path: Path, updates: dict) -> None:
    """Set the OWNED runbook keys in `updates` at their litgpt places, comments and order kept."""
    yaml = round_trip_yaml()
    tree = yaml.load(Path(path).read_text(encoding="utf-8"))
    for key, value in updates.items():
        *parents, last = OWNED[key]
        node = tree
        for parent in parents:
            if not isinstance(node.get(parent), dict):
                node[parent] = {}
            node = node[parent]
        node[last] = str(value) if isinstance(value, Path) else value
    buffer = io.StringIO()
    yaml.dump(tree, buffer)
    atomic_write_text(Path(path), buffer.getvalue())


def launch_config(loaded, resume_from: Path | None) -> dict:
    """The user's litgpt config (trainer.extra merged) with only what supervision needs set on top."""
    cfg = loaded.config
    base = effective(read(loaded.resolve(cfg.trainer.litgpt_config)), cfg.trainer.extra)
    train = base.get("train") or {}
    own = {
        "out_dir": str(loaded.out_dir),
        "resume": str(resume_from) if resume_from else False,
        "seed": cfg.seed,
        "tokenizer_dir": str(loaded.data_path("tokenizer_dir")),
        "train": {
            "save_interval": cfg.save_interval, "global_batch_size": cfg.batch_size,
            "micro_batch_size": cfg.micro_batch_size, "max_tokens": cfg.max_tokens,
            "log_interval": 1,   # runbook follows progress line by line
            # An lr cut below min_lr would make the cosine climb back to min_lr: the floor follows the cut.
            "min_lr": min(train.get("min_lr", 4e-5), cfg.lr),
        },
        "optimizer": {"init_args": {"lr": cfg.lr}},
    }
    return deep_merge(base, own)
