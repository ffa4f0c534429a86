"""The rollback's NaN scan of a `kind: script` state.pt, on real torch.save files holding what people save
beside their tensors (argparse's Namespace, pathlib paths, numpy scalars and arrays): read, never executed;
a file it cannot read is told from one holding NaN, and kept."""

from __future__ import annotations

import argparse
import os
import pathlib

import numpy
import pytest
import torch

from engine.checkpoints.catalog import CheckpointCatalog
from engine.checkpoints.rollback import UnreadableWeights
from engine.core.run_folder import RunFolder
from engine.trainers.script import weights
from engine.trainers.script.adapter import ScriptAdapter


def users_state(nan: bool = False) -> dict:
    bias = torch.tensor([1.0, float("nan") if nan else 2.0])
    return {"step": numpy.int64(8), "best_val": numpy.float64(1.25), "seen": numpy.arange(3),
            "args": argparse.Namespace(lr=0.003, out=pathlib.Path("/runs/a")), "data": pathlib.PurePosixPath("/d"),
            "model": {"wte.weight": torch.ones(4, 2), "head.bias": bias, "steps": torch.tensor(8)},
            "optimizer": {"state": {0: {"exp_avg": torch.zeros(4, 2)}}, "param_groups": [{"lr": 0.003}]}}


class RunsCode:
    """What a hostile (or careless) pickle holds: its reduce would call os.system when loaded."""

    def __init__(self, marker: pathlib.Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_state_with_a_namespace_paths_and_numpy_values_is_read_and_its_nan_named(tmp_path):
    torch.save(users_state(), tmp_path / "clean.pt")
    torch.save(users_state(nan=True), tmp_path / "nan.pt")
    assert weights.nonfinite_names(tmp_path / "clean.pt", "model", 3) == []
    assert weights.nonfinite_names(tmp_path / "nan.pt", "model", 3) == ["head.bias"]
    assert weights.nonfinite_names(tmp_path / "nan.pt", None, 3) == ["model.head.bias"]   # the whole state, nested


def test_an_object_whose_reduce_would_run_code_is_refused_not_run(tmp_path):
    marker = tmp_path / "ran"
    torch.save({**users_state(), "hook": RunsCode(marker)}, tmp_path / "state.pt")
    with pytest.raises(UnreadableWeights, match=r"state.pt: cannot read.*system"):
        weights.nonfinite_names(tmp_path / "state.pt", "model", 3)
    assert not marker.exists()


def test_a_weights_key_naming_no_key_of_the_state_says_so(tmp_path):
    torch.save({"net": users_state()["model"]}, tmp_path / "state.pt")
    with pytest.raises(UnreadableWeights, match=r"no key 'model' \(trainer.weights_key\); its keys: \['net'\]"):
        weights.nonfinite_names(tmp_path / "state.pt", "model", 3)
    torch.save(users_state()["model"], tmp_path / "state.pt")   # the bare state dict, under the default key
    with pytest.raises(UnreadableWeights, match="it is a state dict itself: set trainer.weights_key: null"):
        weights.nonfinite_names(tmp_path / "state.pt", "model", 3)
    assert weights.nonfinite_names(tmp_path / "state.pt", None, 3) == []
    torch.save({"model": {"note": "no tensors"}}, tmp_path / "state.pt")
    with pytest.raises(UnreadableWeights, match="no floating-point tensor"):
        weights.nonfinite_names(tmp_path / "state.pt", "model", 3)


def save(out_dir: pathlib.Path, step: int, state: dict) -> None:
    (out_dir / f"step-{step:06d}").mkdir(parents=True)
    torch.save(state, out_dir / f"step-{step:06d}" / "state.pt")


def test_a_rollback_keeps_clean_and_unreadable_checkpoints_and_names_the_steps_it_quarantined(tmp_path):
    """QA: every clean checkpoint holding a Namespace was called untrustworthy and quarantined (the run restarted
    from scratch), and the line said "quarantined 3 at/after step 16" of steps 4, 8 and 12."""
    out_dir, run_dir = tmp_path / "out", tmp_path / "run"
    save(out_dir, 4, users_state())
    save(out_dir, 8, users_state(nan=True))
    save(out_dir, 12, {**users_state(), "hook": RunsCode(tmp_path / "ran")})
    save(out_dir, 16, users_state())
    save(out_dir, 20, users_state())
    catalog = CheckpointCatalog(out_dir, RunFolder(run_dir), run_dir / "quarantine", ScriptAdapter())
    assert catalog.refresh() == [] and catalog.verified == {4, 8, 12, 16, 20}

    result = catalog.rollback(bad_step=19, steps=4, scan_nonfinite=True, why="rollback (test)")
    assert [c.step for c in catalog.checkpoints()] == [4, 12] and result.target.step == 12
    assert result.quarantined == {8: "non-finite weights in head.bias",
                                  16: "saved at step 16, within 4 steps of or after the first bad step 19",
                                  20: "saved at step 20, within 4 steps of or after the first bad step 19"}
    assert set(result.unreadable) == {12} and "cannot read" in result.unreadable[12]
    summary = result.summary()
    assert "quarantined 3 checkpoint(s): step 8 (non-finite weights in head.bias), steps 16, 20 (within 4 steps of or after the first bad step 19)" in summary
    assert "kept step 12 unscanned" in summary and not (tmp_path / "ran").exists()
    moved, target = result   # the (count, new resume point) that callers unpack
    assert (moved, target.step) == (3, 12)
