"""litgpt skips a data window (issue 48 item 1): a real litgpt run resumed from step 10 with RUNBOOK_DATA_SKIP=11-15
in force moves its restored litdata loader 5 positions on (engine/trainers/litgpt/data_skip.py): the checkpoints
after it record 5 x 16 more samples read than steps trained, with the step counter and iter_num the run's (the lr
schedule kept), and the run completes its 40 steps. The window arithmetic is the one the watcher journals
(engine/core/data_windows.py)."""

from __future__ import annotations

import os
import signal

import pytest

from engine.core import data_windows
from engine.trainers.litgpt.data_skip import advanced, positions_to_skip, skipped_where
from tests.conftest import make_project, stop_process, wait_for

SAMPLES_PER_STEP = 16   # configs/run_config.yaml: batch_size 16 on one device


def loader_and_progress(project, step: int) -> tuple[dict, int, int]:
    import torch

    state = torch.load(project.step_dir(step) / "lit_model.pth", map_location="cpu", weights_only=True, mmap=True)
    return state["train_dataloader"], int(state["step_count"]), int(state["iter_num"])


@pytest.mark.slow
def test_a_litgpt_run_resumed_with_a_skipped_window_reads_past_it_and_keeps_its_step(tmp_path, shared_data):
    project = make_project(tmp_path / "project", shared_data)
    project.set(trainer={"env": {"RUNBOOK_DATA_SKIP": "11-15"}})
    watcher = project.watch()
    try:
        wait_for(lambda: project.saved(10), timeout=180, what="the step-10 checkpoint")
        os.kill(project.trainer_pid(), signal.SIGKILL)   # between saves: the resume is from step 10
        assert watcher.wait(timeout=300) == 0, project.watch_output()[-4000:]
    finally:
        stop_process(watcher)
    log = "".join(p.read_text() for p in sorted((project.run_dir / "logs").glob("trainer-*.log")))
    assert "skipping data positions: 5 position(s), 80 samples on this rank, after step 10" in log, log[-3000:]
    [report] = [r for r in map(data_windows.parse_report, log.splitlines()) if r is not None]   # what it left out
    assert (report["rank"], report["after_step"], report["epoch_samples"], report["file"]) == \
        (0, 10, "160-239", "chunk-0-0.bin"), report
    assert report["input_dir"].startswith(str(project.run_dir)), report
    loader, steps, iter_num = loader_and_progress(project, 20)
    assert steps == 20 and iter_num == 20 * (iter_num // 20)   # the step counter is the run's
    assert loader["num_samples_yielded"] == (20 + 5) * SAMPLES_PER_STEP, loader
    assert loader["dataset"]["sample_in_epoch"] == (20 + 5) * SAMPLES_PER_STEP, loader
    loader40, steps40, _ = loader_and_progress(project, 40)
    assert steps40 == 40 and loader40["num_samples_yielded"] == 45 * SAMPLES_PER_STEP   # never skipped twice


def test_the_loader_moves_only_past_windows_ahead_of_it():
    windows = [(11, 15)]
    assert positions_to_skip(10, 160, 16, windows) == 5      # resumed from step 10: 11-15 skipped
    assert positions_to_skip(20, 25 * 16, 16, windows) == 0  # a checkpoint saved after the skip
    assert positions_to_skip(5, 80, 16, windows) == 0        # the window is ahead: trained by this launch
    assert positions_to_skip(10, 160, 16, [(11, 15), (16, 18)]) == 8


def test_an_advanced_state_is_a_copy_and_refuses_to_pass_the_epochs_end():
    state = {"num_samples_yielded": 160, "current_epoch": 1,
             "dataset": {"num_samples_yielded": 160, "sample_in_epoch": 320, "world_size": 2,
                         "region_of_interest": [(0, 300)]}}
    moved = advanced(state, 80)
    assert (moved["num_samples_yielded"], moved["dataset"]["num_samples_yielded"], moved["dataset"]["sample_in_epoch"]) \
        == (240, 240, 480)
    assert state["num_samples_yielded"] == 160 and state["dataset"]["sample_in_epoch"] == 320
    with pytest.raises(ValueError, match="past the epoch's end"):
        advanced(state, 141)


def test_what_a_rank_skipped_is_told_in_litdatas_terms():
    state = {"current_epoch": 1, "num_samples_yielded": 84,
             "dataset": {"num_samples_yielded": 84, "input_dir_path": "/data/train", "shuffle": True,
                         "subsampled_files": ["chunk-0-0.bin"], "region_of_interest": [(0, 11121)]}}
    assert skipped_where(state, 20, 1, 21) == {"rank": 1, "after_step": 21, "input_dir": "/data/train", "epoch": 1,
                                               "epoch_samples": "84-103", "shuffled": True, "file": "chunk-0-0.bin"}
    state["dataset"]["subsampled_files"] = ["chunk-0-0.bin", "chunk-0-1.bin"]   # which chunk: litdata's seeded order
    assert skipped_where(state, 20, 0, 21)["files"] == "2 chunk files"
