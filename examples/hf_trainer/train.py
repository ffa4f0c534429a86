"""A user's own Hugging Face Trainer script, supervised by runbook as `kind: hf-trainer` (docs/trainers.md).

The only runbook lines in it are the callback and its exit status; runbook passes the usual
TrainingArguments flags (--output_dir, --per_device_train_batch_size, --gradient_accumulation_steps,
--learning_rate, --max_steps, --save_steps, --resume_from_checkpoint ...). A tiny GPT-2 built from a
config in code and a byte-level vocabulary (256): nothing is downloaded. The data are the .txt files of
RUNBOOK_TRAIN_DIR (or --train_dir), cut into blocks of --block_size bytes; with --eval_strategy steps, those of
RUNBOOK_VAL_DIR (or --val_dir) are evaluated every --eval_steps.

RUNBOOK_EXAMPLE_ACTIVATION_MB=N makes every micro-batch sample hold N MB more for its step (think
activations) from step RUNBOOK_EXAMPLE_ACTIVATION_FROM_STEP on (default 1): a real allocation, which
fails only where memory is really short (trainer.memory_limit_mb); with RUNBOOK_EXAMPLE_ACTIVATION_RANK=R only
on rank R (several ranks under torchrun).

A user's bug, armed from outside for the multi-rank scenarios (tests/cluster/test_launcher_ranks.py):
RUNBOOK_EXAMPLE_BUG_AT_STEP=N with RUNBOOK_EXAMPLE_BUG_RANK=R: rank R raises in this script's own code at
step N; RUNBOOK_EXAMPLE_EXIT_AT_STEP=N with RUNBOOK_EXAMPLE_EXIT_RANK=R: rank R leaves (exit 0) at step N.
RUNBOOK_EXAMPLE_STEP_SECONDS=S makes every step take S seconds more (think a bigger model).
RUNBOOK_EXAMPLE_RECORD_SAMPLES=FILE appends the index of every training sample read to FILE (which data trained).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, HfArgumentParser, Trainer, TrainerCallback, TrainingArguments

from runbook.hf_callback import RunbookCallback


@dataclass
class DataArguments:
    train_dir: str = field(default_factory=lambda: os.environ.get("RUNBOOK_TRAIN_DIR", "data/train"))
    val_dir: str = field(default_factory=lambda: os.environ.get("RUNBOOK_VAL_DIR", "data/val"))
    block_size: int = 64


class Blocks(torch.utils.data.Dataset):
    def __init__(self, train_dir: Path, block: int, record: str | None = None):
        data = b"".join(p.read_bytes() for p in sorted(Path(train_dir).rglob("*.txt")))
        self.ids = torch.tensor(list(data[: len(data) // block * block]), dtype=torch.long).view(-1, block)
        self.record = record

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        if self.record:   # which samples were trained, in order (the data-skip test reads it)
            with open(self.record, "a") as f:
                f.write(f"{i}\n")
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Activations(TrainerCallback):
    """The env-armed memory fault (see the module docstring)."""

    def __init__(self, mb: int, from_step: int):
        self.mb, self.from_step = mb, from_step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 < self.from_step:   # global_step counts the steps done
            return
        held = torch.empty(self.mb * args.per_device_train_batch_size * 2**18)   # 4-byte floats, reserved
        del held


class UsersBug(TrainerCallback):
    """The env-armed code bug, early exit or slower steps (see the module docstring)."""

    def __init__(self, environ):
        self.rank = int(environ.get("RANK", "0"))
        self.bug = self._at(environ, "BUG")
        self.exit = self._at(environ, "EXIT")
        self.step_seconds = float(environ.get("RUNBOOK_EXAMPLE_STEP_SECONDS") or 0)

    def _at(self, environ, name: str) -> int | None:
        at = environ.get(f"RUNBOOK_EXAMPLE_{name}_AT_STEP")
        return int(at) if at and int(environ.get(f"RUNBOOK_EXAMPLE_{name}_RANK", "0")) == self.rank else None

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.step_seconds)
        if state.global_step == self.bug:
            raise RuntimeError(f"the user's own bug at step {state.global_step}")
        if state.global_step == self.exit:
            sys.exit(0)


def main() -> int:
    args, data_args = HfArgumentParser((TrainingArguments, DataArguments)).parse_args_into_dataclasses()
    torch.manual_seed(args.seed)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=data_args.block_size,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    callbacks = [RunbookCallback()]
    mb = int(os.environ.get("RUNBOOK_EXAMPLE_ACTIVATION_MB") or 0)
    if mb and os.environ.get("RANK", "0") == os.environ.get("RUNBOOK_EXAMPLE_ACTIVATION_RANK", os.environ.get("RANK", "0")):
        callbacks.append(Activations(mb, int(os.environ.get("RUNBOOK_EXAMPLE_ACTIVATION_FROM_STEP") or 1)))
    callbacks.append(UsersBug(os.environ))
    # Evaluated only when asked (--eval_strategy steps --eval_steps N): the callback reports HF's eval_loss.
    evaluated = Blocks(Path(data_args.val_dir), data_args.block_size) if args.eval_strategy != "no" else None
    trainer = Trainer(model=GPT2LMHeadModel(config), args=args, callbacks=callbacks,
                      train_dataset=Blocks(Path(data_args.train_dir), data_args.block_size,
                                          os.environ.get("RUNBOOK_EXAMPLE_RECORD_SAMPLES")), eval_dataset=evaluated)
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    return RunbookCallback.finish(trainer)


if __name__ == "__main__":
    sys.exit(main())
