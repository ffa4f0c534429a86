"""Scratch projects for each trainer the scenario suite runs: the toy (tests/toy_trainer/), a user's
Hugging Face Trainer script (examples/hf_trainer/train.py) and a plain nanoGPT-style script
(examples/script/train.py), each a real `runbook watch` of a tiny model on a corpus made here."""

from __future__ import annotations

import argparse
import inspect
import json
import textwrap
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO, Project

STEPS, SAVE_INTERVAL, BATCH, MICRO, BLOCK = 24, 4, 8, 4, 32


@dataclass(frozen=True)
class Trainer:
    name: str
    kind: str
    trainer: dict            # the run config's trainer: section
    final_file: str          # the final checkpoint's resume file, for weight parity
    fault_env: str = "RUNBOOK_EXAMPLE_ACTIVATION_MB"


TRAINERS = {t.name: t for t in (
    Trainer("toy", "python:tests.toy_trainer.adapter:ToyAdapter", {"extra": {"step_seconds": 0.03}}, "state.json"),
    Trainer("hf-trainer", "hf-trainer",
            {"script": str(REPO / "examples" / "hf_trainer" / "train.py"),
             "args": ["--block_size", "{block_size}", "--dataloader_num_workers", "0"]}, "model.safetensors"),
    Trainer("script", "script",
            {"command": ["{python}", str(REPO / "examples" / "script" / "train.py"), "--out", "{out_dir}",
                         "--train-dir", "{train_dir}", "--steps", "{max_steps}", "--save-interval", "{save_interval}",
                         "--micro-batch", "{micro_batch_size}", "--batch", "{batch_size}", "--lr", "{lr}",
                         "--seed", "{seed}", "--block", "{block_size}"]}, "state.pt"),
)}

# A user's plain DDP script under torchrun (examples/ddp_script/train.py): 2 ranks over gloo, each its share of
# the global batch; the multi-rank scenarios (tests/cluster/test_launcher_ranks.py) break it from outside.
DDP_SCRIPT = Trainer("ddp-script", "script", {
    "command": ["{python}", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                str(REPO / "examples" / "ddp_script" / "train.py"), "--out", "{out_dir}", "--train-dir", "{train_dir}",
                "--steps", "{max_steps}", "--save-interval", "{save_interval}", "--micro-batch", "{micro_batch_size}",
                "--batch", "{batch_size}", "--lr", "{lr}", "--seed", "{seed}", "--block", "{block_size}"]}, "state.pt")


def corpus() -> str:
    """About 150 KB of real text (Python's own source), the same on every run."""
    return "".join(inspect.getsource(m) for m in (json.decoder, json.encoder, argparse, textwrap))


def make_project(root: Path, trainer: Trainer, **updates) -> Project:
    (root / "configs").mkdir(parents=True)
    for name in ("train", "val"):
        (root / "data" / name).mkdir(parents=True)
    text = corpus()
    (root / "data" / "train" / "corpus.txt").write_text(text[: len(text) * 9 // 10])
    (root / "data" / "val" / "corpus.txt").write_text(text[len(text) * 9 // 10:])
    config = {
        "micro_batch_size": MICRO, "batch_size": BATCH, "lr": 0.003, "save_interval": SAVE_INTERVAL,
        "keep_last_k": 20, "seed": 1337, "max_tokens": STEPS * BATCH * BLOCK,
        "out_dir": "checkpoints/pretrain", "run_log": "docs/run-log.md", "run_dir": "runs/pretrain",
        "model": {"block_size": BLOCK},
        "data": {"train_dir": "data/train", "val_dir": "data/val", "tokenizer_dir": "data/tokenizer", "make_default": False},
        # preflight_parse off for speed, as tests/conftest.py does: `runbook check` and its tests parse for real
        "trainer": {"kind": trainer.kind, "device": "cpu", "env": {"OMP_NUM_THREADS": "1"}, "preflight_parse": False,
                    **trainer.trainer},
        "watch": {"poll_interval_s": 0.2, "hang_timeout_s": 60, "grace_period_s": 10},
    }
    (root / "configs" / "run_config.yaml").write_text(json.dumps(config, indent=1))   # JSON is YAML
    project = Project(root)
    if updates:
        project.set(**updates)
    return project
