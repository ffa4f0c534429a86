"""Save on notice inside litgpt's own loop: finish the optimizer step under way, write a checkpoint in
litgpt's layout, exit NOTICE_EXIT_CODE. litgpt 0.5.13 installs no signal handler (a SIGTERM loses
every step since the last scheduled save); Megatron-LM's --exit-signal-handler is the model.

- The signals are RUNBOOK_NOTICE_SIGNALS ("SIGTERM,SIGUSR1"; set by launch.py from
  trainer.notice_signals). The handler only notes the notice; the loop acts on it. Before litgpt's
  loop has started there is no step to lose, and the process ends at once.
- Where: litgpt's `fit` makes `CycleIterator(train_dataloader)` and asks it for the next batch at the
  top of every iteration, after the previous iteration's optimizer step, validation and scheduled
  save. The iterator is replaced by one that first calls `NoticeGuard.at_boundary()`; mid-way through
  gradient accumulation it waits for the step's last micro-batch. The loop itself is litgpt's.
- Agreement: with several ranks every rank all-reduces its flag at each step boundary (Megatron
  all-gathers it), so all ranks save the same step or none does.
- The save: litgpt's own pieces (fabric.save, save_hyperparameters, copy_config_files, save_config)
  into a staging folder `notice-save-NNNNNNNN.staging` beside TMPDIR's other temporaries (the
  checkpoints' filesystem; never named `step-*`, which `--resume auto` would pick), every file fsynced,
  then one rename onto out_dir/step-NNNNNNNN. A kill before the rename leaves only the staging folder,
  which no resume reads and the next launch clears (engine/checkpoints/partial_saves.py: TMPDIR is runbook's).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any, cast

from engine.core.crash_points import crash_point
from engine.core.durable import fsync_dir, fsync_tree
from engine.core.exit_codes import SAVED_ON_NOTICE

if TYPE_CHECKING:
    from lightning.fabric import Fabric

NOTICE_SIGNALS_ENV = "RUNBOOK_NOTICE_SIGNALS"
NOTICE_EXIT_CODE = SAVED_ON_NOTICE   # 75: stopped on a notice, to be resumed; playbooks/preemption.yaml
STAGING_SUFFIX = ".staging"


def notice_signals(environ: Mapping[str, str] = os.environ) -> list[signal.Signals]:
    """PURE over environ. The configured notice signals; [] when save-on-notice is off."""
    names = [n.strip() for n in environ.get(NOTICE_SIGNALS_ENV, "").split(",") if n.strip()]
    return [signal.Signals[name] for name in names]


def say(text: str) -> None:
    print(f"runbook: {text}", flush=True)


class NoticeGuard:
    """The notice flag, and what the loop does with it at an optimizer-step boundary."""

    def __init__(self) -> None:
        self.notice: str | None = None   # the signal's name, once one came
        self.loop: dict | None = None    # litgpt's fit arguments, from its first call

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        first = self.notice is None
        self.notice = self.notice or signal.Signals(signum).name
        if self.loop is None:   # litgpt's loop has not started: no step to lose
            say(f"{self.notice} before the first training step: exiting without a save")
            os._exit(NOTICE_EXIT_CODE)
        if first:
            say(f"{self.notice} received: saving after the optimizer step under way")

    def at_boundary(self) -> None:
        loop = self.loop
        assert loop is not None   # the iterator that calls this runs inside fit(), which set it
        fit_dict = loop["fit_dict"]
        if fit_dict["iter_num"] % loop["accumulation"]:
            return   # mid-accumulation: the notice waits for the step's last micro-batch
        if not self.agreed(loop["fabric"]):
            return
        step = fit_dict["step_count"]
        if step == loop["first_step"]:
            say(f"notice at step {step}, no step taken since the start: nothing to save")
        else:
            save_agreed_step(loop, step)
        loop["fabric"].barrier()
        sys.stdout.flush()
        os._exit(NOTICE_EXIT_CODE)   # litdata's workers and Lightning's atexit hooks have nothing to keep

    def agreed(self, fabric: Fabric) -> bool:
        if fabric.world_size == 1:
            return self.notice is not None
        import torch

        flag = torch.tensor([1 if self.notice else 0], device=fabric.device)
        summed = fabric.all_reduce(flag, reduce_op="sum")   # a tensor in, a tensor out
        return bool(cast(torch.Tensor, summed).item())


GUARD = NoticeGuard()


def install_handlers(environ: Mapping[str, str] = os.environ) -> list[signal.Signals]:
    signals = notice_signals(environ)
    for sig in signals:
        signal.signal(sig, GUARD.handle)
    return signals


def attach(pretrain: ModuleType, environ: Mapping[str, str] = os.environ) -> None:
    """Wrap litgpt.pretrain's `fit` (to learn its fit dict) and its CycleIterator (the step boundary)."""
    if not notice_signals(environ):
        return
    original_fit = pretrain.fit
    base_iterator: type = pretrain.CycleIterator   # litgpt's class, subclassed below

    def fit(**kwargs: Any) -> object:   # litgpt's fit arguments: its Fabric, state dict, TrainArgs
        fit_dict, train = kwargs["state"], kwargs["train"]
        GUARD.loop = {
            "fabric": kwargs["fabric"], "fit_dict": fit_dict, "out_dir": Path(kwargs["out_dir"]),
            "tokenizer_dir": kwargs.get("tokenizer_dir"), "pretrain": pretrain,
            "accumulation": train.gradient_accumulation_iters(kwargs["devices"], kwargs.get("num_nodes", 1)),
            "first_step": fit_dict["step_count"],
        }
        return original_fit(**kwargs)

    class NoticeCycleIterator(base_iterator):
        def __next__(self) -> object:
            GUARD.at_boundary()
            return super().__next__()

    setattr(pretrain, "fit", fit)
    setattr(pretrain, "CycleIterator", NoticeCycleIterator)


def staging_dir(out_dir: Path, step: int, environ: Mapping[str, str] = os.environ) -> Path:
    """PURE but for a stat. TMPDIR when it shares out_dir's filesystem (launch.py makes it so)."""
    tmp = Path(environ.get("TMPDIR") or out_dir)
    try:
        same = tmp.is_dir() and tmp.stat().st_dev == out_dir.stat().st_dev
    except OSError:
        same = False
    return (tmp if same else out_dir) / f"notice-save-{step:08d}{STAGING_SUFFIX}"


def save_agreed_step(loop: dict, step: int) -> None:
    fabric, fit_dict, out_dir, pretrain = loop["fabric"], loop["fit_dict"], loop["out_dir"], loop["pretrain"]
    final = out_dir / f"step-{step:08d}"
    if (final / "lit_model.pth").is_file():
        say(f"notice at step {step}: litgpt's scheduled save of this step is already there")
        return
    started = time.perf_counter()
    staging = staging_dir(out_dir, step)
    if fabric.global_rank == 0:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    fabric.barrier()
    # litgpt's announcement, naming the folder the save ends in (engine/checkpoints/partial_saves.py reads it).
    fabric.print(f"Saving checkpoint to {str(final / 'lit_model.pth')!r}")
    fabric.save(staging / "lit_model.pth", fit_dict)
    if fabric.global_rank == 0:
        pretrain.save_hyperparameters(pretrain.setup, staging)
        if loop["tokenizer_dir"] is not None:
            pretrain.copy_config_files(loop["tokenizer_dir"], staging)
        pretrain.save_config(fit_dict["model"].config, staging)
        crash_point("notice-save-staged")   # the tests: killed with a whole save still in staging
        fsync_tree(staging)
        os.replace(staging, final)
        fsync_dir(out_dir)
    fabric.barrier()
    fabric.print(f"runbook: notice save of step {step} complete in {time.perf_counter() - started:.2f} s: {final}")
