"""The Hugging Face Trainer skips a data window (issue 48 item 1, runbook/hf_data_skip.py): a real Trainer
(examples/hf_trainer/train.py, no watcher) resumed from checkpoint-10 with RUNBOOK_DATA_SKIP=11-15 trains its steps
11-20 on exactly the samples an undisturbed run trained at steps 16-25, with gradient accumulation 2 (a position
is one optimizer step's samples); its global step and step count are the Trainer's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.trainers.projects import corpus

pytestmark = pytest.mark.slow
PER_STEP = 2 * 2   # per_device_train_batch_size x gradient_accumulation_steps


def train(tmp_path, record: str, *extra: str, skip: str = "") -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "RUNBOOK_EXAMPLE_RECORD_SAMPLES": str(tmp_path / record),
           "RUNBOOK_DATA_SKIP": skip}
    done = subprocess.run([sys.executable, str(REPO / "examples" / "hf_trainer" / "train.py"),
                           "--output_dir", str(tmp_path / "out"), "--train_dir", str(tmp_path / "data"),
                           "--block_size", "16", "--per_device_train_batch_size", "2",
                           "--gradient_accumulation_steps", "2", "--max_steps", "25", "--save_steps", "10",
                           "--logging_steps", "1", "--seed", "1", "--report_to", "none", "--use_cpu", "true",
                           "--disable_tqdm", "true", *extra],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def samples(tmp_path, record: str) -> list[int]:
    return [int(line) for line in (tmp_path / record).read_text().split()]


def test_a_resumed_trainer_leaves_the_windows_samples_out_and_keeps_its_step(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text(corpus())
    train(tmp_path, "undisturbed.txt")
    undisturbed = samples(tmp_path, "undisturbed.txt")
    assert len(undisturbed) >= 25 * PER_STEP   # (the loader may fetch one micro-batch ahead)
    output = train(tmp_path, "skipped.txt", "--resume_from_checkpoint", str(tmp_path / "out" / "checkpoint-10"),
                   skip="11-15")
    assert "runbook: skipping data positions 11-15 (4 samples each" in output, output[-3000:]
    # it says which dataset rows it left out (engine/core/data_windows.py's report, which the watcher keeps)
    from engine.core import data_windows

    [report] = [r for r in map(data_windows.parse_report, output.splitlines()) if r is not None]
    window_rows = undisturbed[10 * PER_STEP: 15 * PER_STEP]
    assert report["dataset_rows"] == data_windows.ranges(window_rows) and report["rows"] == len(window_rows), report
    resumed = samples(tmp_path, "skipped.txt")
    # steps 11-20 of the resumed run train on positions 16-25: the undisturbed run's steps 16-25
    assert resumed[: 10 * PER_STEP] == undisturbed[15 * PER_STEP: 25 * PER_STEP], (resumed[:12], undisturbed[60:72])
    assert not set(resumed) & set(undisturbed[10 * PER_STEP: 15 * PER_STEP])   # the window's samples never trained
    state = json.loads((tmp_path / "out" / "checkpoint-25" / "trainer_state.json").read_text())
    assert state["global_step"] == 25   # the step counter (and so the lr schedule) is the Trainer's


def test_an_iterable_dataset_or_no_windows_is_left_alone():
    from runbook import hf_data_skip

    class Args:
        per_device_train_batch_size, gradient_accumulation_steps, world_size = 2, 2, 1

    class Loader:   # a DataLoader over an IterableDataset has a batch sampler without a sampler to filter
        batch_sampler = None

    assert hf_data_skip.install(Loader(), Args(), environ={}) is None
    assert "no sampler" in hf_data_skip.install(Loader(), Args(), environ={"RUNBOOK_DATA_SKIP": "3-4"})
    assert "no data skipped" in hf_data_skip.install(Loader(), Args(), environ={"RUNBOOK_DATA_SKIP": "4-3"})


def test_the_skipping_sampler_leaves_out_whole_positions_across_epochs():
    from runbook.hf_data_skip import SkippingSampler

    told: list[dict] = []
    sampler = SkippingSampler(list(range(12)), [(2, 2), (5, 5)], per_position=2, announce=told.append)   # 6 positions per epoch
    order = iter(sampler)
    assert [next(order) for _ in range(4)] == [0, 1, 4, 5] and told == []   # position 5 not reached yet
    assert list(order) == [6, 7, 10, 11] and len(sampler) == 12
    assert told == [{"epoch": 0, "dataset_rows": "2-3,8-9", "rows": 4, "of": "the Trainer's train_dataset (row indices)"}]
    sampler.set_epoch(1)   # positions 7-12: 5 is behind
    assert list(sampler) == list(range(12)) and len(told) == 1   # said once
