"""Reading and rewriting litgpt checkpoint state (torch): progress, the iter_num rescale on a
micro-batch change, non-finite weights, and the data-loader paths a replay must relocate.

Loading is always weights_only, so a checkpoint file cannot run code.
"""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

from ruamel.yaml import YAML

from engine.checkpoints.store import OWN_TMP_PREFIX, own_tmp_prefix
from engine.core.durable import atomic_write


def _load(pth: Path) -> dict:
    # weights_only=True was checked on a real litgpt 0.5.13 pretrain checkpoint (model, AdamW
    # state, litdata StreamingDataLoader state of ints/strs/lists/tuples/None). If a later version
    # stores another type, torch raises UnpicklingError naming it: allow just that type with
    # torch.serialization.add_safe_globals([...]); do not fall back to weights_only=False.
    # mmap=True pages tensors in on use, so reading two ints does not read the whole file.
    import torch  # deferred: importing torch costs ~1 s and most callers here never load

    return torch.load(pth, map_location="cpu", weights_only=True, mmap=True)


def read_progress(pth: Path) -> dict:
    saved = _load(pth)
    return {"iter_num": int(saved["iter_num"]), "step_count": int(saved["step_count"])}


def saved_setting(step_dir: Path, *keys: str) -> object:
    """A setting of the launch that wrote the checkpoint, from the hyperparameters.yaml litgpt saves
    beside it (cheap: no torch); None when the file or the key is missing or unreadable."""
    try:
        value = YAML(typ="safe", pure=True).load((Path(step_dir) / "hyperparameters.yaml").read_text())
        for key in keys:
            value = value[key]
        return value
    except Exception:  # noqa: BLE001 - unknown: the caller falls back to its default
        return None


def checkpoint_micro_batch(step_dir: Path) -> int | None:
    """micro_batch_size the checkpoint was trained with."""
    value = saved_setting(step_dir, "train", "micro_batch_size")
    try:
        return int(value) if isinstance(value, (int, float, str)) else None
    except (TypeError, ValueError):   # unknown means "assume unchanged"
        return None


def rescaled_copy(src_pth: Path, dst_pth: Path, iter_num_factor: float) -> dict:
    """Copy src with iter_num multiplied by iter_num_factor; step_count, weights, optimizer and
    loader state unchanged. The source is never modified. Checked: litgpt resumes from the copy.

    Why: iter_num counts micro-batches, and a resume recomputes max_iters and the warm-up in the new
    micro-batch's units. Resumed at micro-batch 4 -> 2 without the rescale (factor old_mb / new_mb),
    a measured run trained 19% more tokens and moved the cosine lr schedule backwards; with it,
    tokens, optimizer steps and the schedule match the fault-free run."""
    import torch

    src_pth, dst_pth = Path(src_pth), Path(dst_pth)
    if os.path.abspath(src_pth) == os.path.abspath(dst_pth) or (dst_pth.exists() and dst_pth.samefile(src_pth)):
        raise ValueError("dst_pth must differ from src_pth (the source is never modified)")
    if not 0 < iter_num_factor < float("inf"):
        raise ValueError(f"iter_num_factor must be a positive finite number, got {iter_num_factor}")
    saved = _load(src_pth)
    before = int(saved["iter_num"])
    # limit_denominator: 4/3 arrives as 1.3333333333333333; micro-batch ratios are small fractions.
    after = Fraction(before) * Fraction(iter_num_factor).limit_denominator(1_000_000)
    if after.denominator != 1:
        raise ValueError(f"iter_num {before} x {iter_num_factor} = {float(after)} is not an integer")
    saved["iter_num"] = int(after)
    dst_pth.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(dst_pth, lambda f: torch.save(saved, f), prefix=OWN_TMP_PREFIX)  # .part temp: never matches step-*/*.pth
    return {"iter_num_before": before, "iter_num_after": int(after), "step_count": int(saved["step_count"])}


def find_nonfinite_tensors(pth: Path, limit: int = 10) -> list[str]:
    """Names of model tensors holding NaN/Inf, at most ``limit`` (optimizer state is not scanned)."""
    import torch

    bad = []
    for name, t in _load(pth)["model"].items():
        floating = isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())
        if floating and not torch.isfinite(t).all():
            bad.append(name)
            if len(bad) >= limit:
                break
    return bad


def relocate_loader_state(pth: Path, old_run_dir: Path, new_run_dir: Path) -> int:
    """Point the data-loader state of a checkpoint COPY at another run folder; returns how many
    paths changed. litdata keeps the absolute path of its cache (staged under <run_dir>/data/) in
    the loader state and refuses to resume when it differs ("input_dir path state doesn't match")."""
    import torch

    old, new, changed = str(old_run_dir), str(new_run_dir), 0

    def walk(node: object) -> object:
        nonlocal changed
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return type(node)(walk(v) for v in node)
        if isinstance(node, str) and (node == old or node.startswith(old + os.sep)):
            changed += 1
            return new + node[len(old):]
        return node

    saved = torch.load(pth, map_location="cpu", weights_only=True)
    saved["train_dataloader"] = walk(saved.get("train_dataloader"))
    if changed:
        # The out_dir's own temp prefix: a leftover is runbook's, never a file foreign to the checkpoint.
        atomic_write(pth, lambda f: torch.save(saved, f), prefix=own_tmp_prefix(pth.parent.parent))
    return changed


def loader_input_dir(pth: Path) -> str | None:
    """The data folder the checkpoint's train loader read (litdata's input_dir_path), if recorded."""
    loader = _load(pth).get("train_dataloader")
    dataset = loader.get("dataset") if isinstance(loader, dict) else None
    return dataset.get("input_dir_path") if isinstance(dataset, dict) else None


def loader_copy(src_pth: Path, dst_pth: Path, new_input_dir: Path, reset: bool) -> dict:
    """Copy src with the train loader pointed at new_input_dir; with reset, its position is also set
    back to the start of an epoch. Model, optimizer, iter_num and step_count unchanged; src untouched.

    Why reset: litdata's position is a count of samples into one dataset's shuffled order; in other
    data (changed text, tokenizer or block size) that count names different samples, and past the new
    data's end it names none. With 0 samples yielded litdata begins the next epoch of the new data
    (and never compares the old input_dir). Without reset (the same cache, moved) the position holds."""
    import torch

    src_pth, dst_pth = Path(src_pth), Path(dst_pth)
    if os.path.abspath(src_pth) == os.path.abspath(dst_pth):
        raise ValueError("dst_pth must differ from src_pth (the source is never modified)")
    saved = _load(src_pth)
    loader = saved["train_dataloader"]
    dataset = loader["dataset"]
    before = {"input_dir": dataset.get("input_dir_path"), "epoch": loader.get("current_epoch"),
              "samples_yielded": loader.get("num_samples_yielded")}
    dataset["input_dir_path"] = str(new_input_dir)
    if reset:
        loader["num_samples_yielded"] = 0
        dataset["num_samples_yielded"] = 0
        dataset["sample_in_epoch"] = 0
    dst_pth.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(dst_pth, lambda f: torch.save(saved, f), prefix=OWN_TMP_PREFIX)
    return before
