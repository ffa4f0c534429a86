"""The config of a scratch run (a drill, `replay --execute`) made from a user's run.

A scratch run must never write into the user's files. A run config is copied by its callers; a run
based on a trainer config file of the user's (a YAML of the trainer's own) also needs that file copied beside it,
with the scratch run's values (out_dir, max_tokens, the hyperparameters of the replayed record) in
the copy, since the file owns them and a recovery writes them back there. The trainer's settings
model knows its file (TrainerSettings.detach).
"""

from __future__ import annotations

from pathlib import Path


def own_trainer_config(tree: dict, loaded, folder: Path) -> dict:
    """`tree` (the scratch run config, top-level keys as RunConfig names them) with any trainer config
    it is based on copied into `folder`, so the scratch run owns every file it may write."""
    return loaded.config.trainer.detach(tree, loaded, Path(folder))
