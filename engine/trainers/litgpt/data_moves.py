"""A resume onto a data cache other than the one the checkpoint's loader read.

The cache folder changes when the text (accepted with `runbook watch --accept-data-change`), the
tokenizer, the block size or the data module's arguments change; litdata then refuses the loader
state ("The provided `input_dir` path state doesn't match"). The resume gets a copy whose loader
names today's cache: relocated (position kept) when it is the same cache under another folder,
reset (to the start of the next epoch of the new data) when its contents differ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from pathlib import Path

from engine.trainers.base import ResumePlan
from engine.trainers.litgpt import data_cache, launch, resume

if TYPE_CHECKING:
    from engine.checkpoints.store import Checkpoint
    from engine.core.config import LoadedConfig


def follow_data(plan: ResumePlan, checkpoint: Checkpoint, loaded: LoadedConfig, scratch_dir: Path, folder_name: str) -> ResumePlan:
    config = launch.trainer_config(loaded, Path(), Path(), None)
    cache, _ = launch.place_cache(loaded, config, loaded.config.data_hash)
    if cache is None:
        return plan   # a data module of the user's own: its loader state is its own
    # The common case, read from the small YAML litgpt saves beside the weights: the launch that wrote
    # this checkpoint read today's cache. Only otherwise is the checkpoint itself loaded (torch, seconds).
    if str(resume.saved_setting(checkpoint.path, "data", "init_args", "train_data_path")) == str(cache / "train"):
        return plan
    recorded = resume.loader_input_dir(plan.file)
    if recorded is None:
        return plan
    today = data_cache.loader_input_dir(cache)
    if Path(recorded) == today:
        return plan
    reset = Path(recorded).parent.parent.name != cache.name   # <key>/train/train: another key, other contents
    copy = Path(scratch_dir) / f"{folder_name}-data-{cache.name}.pth"
    before = resume.loader_copy(plan.file, copy, today, reset=reset)
    if reset:
        what = (f"the data loader was RESET: the data cache changed ({Path(recorded).parent.parent.name} -> "
                f"{cache.name}: text, tokenizer, block size or data arguments), so the loader's position "
                f"({before['samples_yielded']} samples into epoch {before['epoch']} of the old data) names nothing "
                "in the new data; training continues from the checkpoint's weights, optimizer and step with the "
                "next epoch of the new data, read from its start in its own shuffled order")
    else:
        what = (f"the data loader was RELOCATED to {today} (the same cache, moved); its position "
                f"({before['samples_yielded']} samples into epoch {before['epoch']}) and the data order are kept")
    note = f"{plan.note}; " if plan.note else ""
    return ResumePlan(copy, f"{plan.detail} ({'loader reset for new data' if reset else 'loader relocated'})",
                      f"{note}resumed from a copy of step {checkpoint.step}: {what}; the original checkpoint is untouched")

