"""Real checkpoints of a `kind: script` run for the engine/checkpoints mutation tests (tests/unit/test_mut_ckpt_*):
step-NNNNNN/state.pt written by torch.save, announced in the run's trainer log as runbook/sdk.py prints it."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from engine.checkpoints.catalog import CheckpointCatalog
from engine.core.run_folder import RunFolder
from engine.trainers.script.adapter import ScriptAdapter


def save(out_dir: Path, step: int, nan: bool = False, name: str | None = None) -> Path:
    """One checkpoint folder as a script's torch.save writes it (a NaN in its weights when asked)."""
    folder = Path(out_dir) / (name or f"step-{step:06d}")
    folder.mkdir(parents=True)
    weights = torch.full((4,), float(step))
    if nan:
        weights[1] = float("nan")
    torch.save({"model": {"w": weights}, "step": step}, folder / "state.pt")
    return folder


def announce(run_dir: Path, *folders: Path, log: str = "trainer-001.log") -> None:
    """The sdk's announcement of each save, appended to the run's trainer log."""
    (Path(run_dir) / "logs").mkdir(parents=True, exist_ok=True)
    with open(Path(run_dir) / "logs" / log, "a") as f:
        f.writelines(f"runbook: saving {os.path.abspath(p)}\n" for p in folders)


def catalog_of(tmp_path: Path, journal=None, read_only: bool = False) -> CheckpointCatalog:
    """The catalog of tmp_path/out, run folder tmp_path/run, quarantine tmp_path/run/quarantine."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    return CheckpointCatalog(tmp_path / "out", RunFolder(run_dir), run_dir / "quarantine", ScriptAdapter(),
                             journal=journal, read_only=read_only)


def saved(tmp_path: Path, *steps: int, seal: bool = True) -> CheckpointCatalog:
    """A catalog over announced saves of these steps, refreshed (sealed) when asked."""
    catalog = catalog_of(tmp_path)
    announce(tmp_path / "run", *(save(catalog.out_dir, s) for s in steps))
    if seal:
        assert catalog.refresh() == []
    return catalog
