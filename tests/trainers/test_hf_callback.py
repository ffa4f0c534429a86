"""runbook.hf_callback.RunbookCallback in a real transformers.Trainer run (examples/hf_trainer/train.py,
no watcher): the run config's lr wins over a resumed checkpoint's, and the rank heartbeat is written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.trainers.projects import corpus

pytestmark = pytest.mark.slow


def train(tmp_path, lr: float, *extra: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "RUNBOOK_RANKS_DIR": str(tmp_path / "ranks")}
    done = subprocess.run([sys.executable, str(REPO / "examples" / "hf_trainer" / "train.py"),
                           "--output_dir", str(tmp_path / "out"), "--train_dir", str(tmp_path / "data"),
                           "--block_size", "32", "--per_device_train_batch_size", "4", "--max_steps", "8",
                           "--save_steps", "4", "--logging_steps", "1", "--learning_rate", repr(lr), "--seed", "1",
                           "--report_to", "none", "--use_cpu", "true", "--disable_tqdm", "true", *extra],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def test_a_resume_uses_the_run_configs_lr_and_each_rank_beats(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text(corpus())
    (tmp_path / "ranks").mkdir()
    first = train(tmp_path, 3e-3)
    assert f"runbook: saving {tmp_path / 'out' / 'checkpoint-4'}" in first
    beat = json.loads((tmp_path / "ranks" / "rank-0.json").read_text())
    assert (beat["rank"], beat["step"], beat["pid"] > 0) == (0, 8, True)
    resumed = train(tmp_path, 3e-4, "--resume_from_checkpoint", str(tmp_path / "out" / "checkpoint-4"))
    # Linear decay over 8 steps from the peak: step 5 runs at peak x 4/8. HF alone would take the saved
    # optimizer's and scheduler's peak (3e-3 -> 1.5e-3); the callback makes the new one (3e-4) win.
    first_lr = float(re.search(r"'learning_rate': '([^']+)'", resumed).group(1))
    assert first_lr == pytest.approx(1.5e-4, rel=1e-3), first_lr


def test_each_evaluation_prints_hfs_eval_loss_as_runbooks_val_loss(tmp_path):
    from engine.observe.events import Validation
    from engine.trainers.hf.adapter import HFTrainerAdapter

    for name in ("data", "val"):
        (tmp_path / name).mkdir()
    text = corpus()
    (tmp_path / "data" / "a.txt").write_text(text)
    (tmp_path / "val" / "a.txt").write_text(text[: len(text) // 20])
    (tmp_path / "ranks").mkdir()
    output = train(tmp_path, 3e-3, "--eval_strategy", "steps", "--eval_steps", "4", "--val_dir", str(tmp_path / "val"),
                   "--per_device_eval_batch_size", "8")
    events = [HFTrainerAdapter().parse_line(line) for line in output.splitlines()]
    validations = [e for e in events if isinstance(e, Validation)]
    assert [v.iter_num for v in validations] == [4, 8], output[-3000:]
    eval_losses = [float(v) for v in re.findall(r"'eval_loss': '?([0-9.]+)", output)]   # HF logs it rounded
    assert [v.val_loss for v in validations] == pytest.approx(eval_losses[:2], rel=1e-3) and len(eval_losses) == 2
