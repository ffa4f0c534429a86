"""The config of a scratch run (a drill, `replay --execute`) made from a user's run.

A scratch run must never write into the user's files. A run config is copied by its callers; a run
based on a trainer config file of the user's (a YAML of the trainer's own) also needs that file copied beside it,
with the scratch run's values (out_dir, max_tokens, the hyperparameters of the replayed record) in
the copy, since the file owns them and a recovery writes them back there. The trainer's settings
model knows its file (TrainerSettings.detach).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig, TrainerSettings


def own_trainer_config(tree: dict, loaded: LoadedConfig, folder: Path) -> dict:
    """`tree` (the scratch run config, top-level keys as RunConfig names them) with any trainer config
    it is based on copied into `folder`, so the scratch run owns every file it may write, and the trainer's
    relative paths anchored to the user's project (the scratch run's project folder is another one)."""
    tree = loaded.config.trainer.detach(tree, loaded, Path(folder))
    if changed := anchored(tree.get("trainer") or {}, loaded.config.trainer, loaded.project_dir):
        tree.setdefault("trainer", {}).update(changed)
    return tree


def anchored(trainer: dict, settings: TrainerSettings, project_dir: Path) -> dict:
    """The keys of the `trainer:` section whose relative paths of the user's project are made absolute: a Path setting
    (hf-trainer's `script`, its default "train.py" too) and an argv item naming a file or folder there (kind
    script's `command`: ["{python}", "train.py", ...]), with their new values. Absolute values (a copy detach
    made) stay. PURE but for the existence of the argv items' files."""
    changed: dict = {}
    for name in type(settings).model_fields:
        value, written = getattr(settings, name), trainer.get(name)
        if isinstance(value, Path) and not value.is_absolute() and not (written and Path(str(written)).is_absolute()):
            changed[name] = str((project_dir / value).resolve())
        elif isinstance(written, list) and any(_names_a_project_path(item, project_dir) for item in written):
            changed[name] = [str((project_dir / item).resolve()) if _names_a_project_path(item, project_dir) else item
                             for item in written]
    return changed


def _names_a_project_path(item: object, project_dir: Path) -> bool:
    """A relative, path-shaped argv item ("train.py", "conf/model.json": not "2", "--lr", "{out_dir}") that exists."""
    if not isinstance(item, str) or not item or item.startswith("-") or "{" in item or Path(item).is_absolute():
        return False
    return ("/" in item or bool(Path(item).suffix)) and (project_dir / item).exists()
