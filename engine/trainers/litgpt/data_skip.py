"""litgpt's side of a skipped data window (RUNBOOK_DATA_SKIP, engine/core/data_windows.py): on a resume, the
restored litdata loader is moved past the windows the next step would otherwise train on.

Why here and not in a rewritten checkpoint copy: the windows are in the launch's environment, whichever way it
was started (an incident's resume, a watcher restarted, a requeued job), and every rank moves its own loader.
How: litgpt's `fabric.load(resume, state)` hands the loader its saved dict (`load_state_dict`); we keep that dict,
and when `fit` starts (the step counter known: fit_dict["step_count"]) the loader is loaded again with its position
advanced by the skipped positions' samples: micro_batch_size x accumulation per position on each rank. The
step counter and iter_num are untouched, so the lr schedule and the number of steps trained stay the run's;
only the data moves. Windows already behind the loader (a checkpoint saved after the skip) move nothing.

A window that begins after the checkpoint's next position (a rollback to well before it) is not skipped by
this launch: litdata cannot jump mid-epoch once iterating, so that data is trained again (docs/trainers.md).
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from engine.core import data_windows

SAVED = "_runbook_saved_loader_state"


def say(text: str) -> None:
    print(f"runbook: {text}", file=sys.stderr, flush=True)


def advanced(loader_state: dict, samples: int) -> dict:
    """PURE. A copy of a litdata StreamingDataLoader state `samples` further into its epoch (this rank's count)."""
    moved = copy.deepcopy(loader_state)
    dataset = moved["dataset"]
    length = sum(last - first for first, last in dataset.get("region_of_interest") or [])
    if length and dataset["num_samples_yielded"] + samples > length:
        raise ValueError(f"cannot skip {samples} samples: the epoch holds {length} and "
                         f"{dataset['num_samples_yielded']} were read (a window past the epoch's end)")
    moved["num_samples_yielded"] += samples
    dataset["num_samples_yielded"] += samples
    if "sample_in_epoch" in dataset:   # litdata's count over every rank
        dataset["sample_in_epoch"] += samples * int(dataset.get("world_size") or 1)
    return moved


def skipped_where(loader_state: dict, samples: int, rank: int, step_count: int) -> dict:
    """PURE. What one rank left out, in litdata's terms (engine/core/data_windows.py's report): the samples of its
    epoch it moved past, in which input folder, and the chunk file when the data is one file. Which chunk
    holds a sample of a shuffled epoch is litdata's seeded order's, not told here."""
    dataset = loader_state.get("dataset") or {}
    first = int(dataset.get("num_samples_yielded") or 0)
    files = dataset.get("subsampled_files") or []
    where: dict = {"rank": rank, "after_step": step_count, "input_dir": dataset.get("input_dir_path"),
                   "epoch": loader_state.get("current_epoch"), "epoch_samples": f"{first}-{first + samples - 1}",
                   "shuffled": bool(dataset.get("shuffle"))}
    if len(files) == 1:
        where["file"] = files[0]
    else:
        where["files"] = f"{len(files)} chunk files"
    return where


def positions_to_skip(step_count: int, samples_yielded: int, samples_per_position: int,
                      windows: list[tuple[int, int]]) -> int:
    """PURE. How many positions the loader, having read `samples_yielded`, must pass so that the next step
    (step_count + 1) trains on its own position."""
    read = samples_yielded // samples_per_position
    return max(0, data_windows.position(step_count + 1, windows) - 1 - read)


def attach(pretrain: ModuleType, environ: Mapping[str, str] = os.environ) -> None:
    """Wrap litdata's loader restore (to keep the saved dict) and litgpt's `fit` (to move it); nothing without
    windows to skip."""
    try:
        windows = data_windows.parse(environ.get(data_windows.ENV))
    except ValueError as error:
        say(f"{error}: no data skipped")
        return
    if not windows:
        return
    from litdata import StreamingDataLoader

    original_load = StreamingDataLoader.load_state_dict

    def load_state_dict(self: object, obj: object) -> object:
        setattr(self, SAVED, obj)
        return original_load(self, obj)

    StreamingDataLoader.load_state_dict = load_state_dict   # type: ignore[method-assign]
    original_fit = pretrain.fit

    def fit(**kwargs: Any) -> object:   # litgpt's fit arguments: its loader, state dict, TrainArgs
        loader, fit_dict, train = kwargs["train_dataloader"], kwargs["state"], kwargs["train"]
        saved = getattr(getattr(loader, "_dataloader", loader), SAVED, None)   # fabric may wrap the loader
        if saved is not None:
            per_position = train.micro_batch_size * train.gradient_accumulation_iters(kwargs["devices"],
                                                                                      kwargs.get("num_nodes", 1))
            skip = positions_to_skip(fit_dict["step_count"], saved["num_samples_yielded"], per_position, windows)
            if skip:
                target = getattr(loader, "_dataloader", loader)
                original_load(target, advanced(saved, skip * per_position))
                say(f"skipping data positions: {skip} position(s), {skip * per_position} samples on this rank, "
                    f"after step {fit_dict['step_count']} ({data_windows.ENV}={data_windows.format_windows(windows)})")
                fabric = kwargs.get("fabric")
                rank = int(getattr(fabric, "global_rank", 0) or 0)
                print(data_windows.report_line(skipped_where(saved, skip * per_position, rank, fit_dict["step_count"])),
                      file=sys.stderr, flush=True)
        return original_fit(**kwargs)

    setattr(pretrain, "fit", fit)
