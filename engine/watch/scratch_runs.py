"""The config of a scratch run (a drill, `replay --execute`) made from a user's run.

A scratch run must never write into the user's files. A run config is copied by its callers; a run
based on the user's litgpt YAML (trainer.litgpt_config) also needs that YAML copied beside it, with
the scratch run's values (out_dir, max_tokens, the hyperparameters of the replayed record) in the
copy, since the YAML owns them and a recovery writes them back there.
"""

from __future__ import annotations

from pathlib import Path

from engine.trainers.litgpt import user_config


def own_trainer_config(tree: dict, loaded, folder: Path) -> dict:
    """`tree` (the scratch run config, top-level keys as RunConfig names them) with any trainer config
    it is based on copied into `folder`, so the scratch run owns every file it may write."""
    if not loaded.config.trainer.litgpt_config:
        return tree

    return user_config.detach(tree, loaded, Path(folder) / "litgpt" / "pretrain.yaml")
