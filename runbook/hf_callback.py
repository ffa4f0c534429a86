"""runbook's TrainerCallback for a Hugging Face Trainer script (trainer kind `hf-trainer`, docs/trainers.md).

    trainer = Trainer(model, args, train_dataset=..., callbacks=[RunbookCallback()])
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    sys.exit(RunbookCallback.finish(trainer))

It prints runbook/sdk.py's lines (a progress line per logged step, a validation line per evaluation with
its eval_loss, each save announced before it is written), saves the step in progress and exits 75 on a notice signal (SIGTERM by default), makes the
run config's learning rate win over the one a resumed checkpoint recorded, and writes a rank heartbeat
where runbook asks for one (RUNBOOK_RANKS_DIR).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import TrainerCallback

from runbook import hf_data_skip, sdk   # standard library only: the user's folder may hold an engine.py of its own

if TYPE_CHECKING:   # annotations only
    from torch.optim import Optimizer
    from torch.optim.lr_scheduler import LRScheduler
    from torch.serialization import STORAGE
    from torch.utils.data import DataLoader
    from transformers import Trainer, TrainerControl, TrainerState, TrainingArguments


def _restore_cpu_with_index(storage: STORAGE, location: str) -> STORAGE | None:
    """Several CPU ranks (DDP over gloo): the Trainer resumes its rng_state_<rank>.pth with map_location
    "cpu:0", a location torch's own CPU deserializer does not take ("don't know how to restore data location
    ... (tagged with cpu:0)": every resume of a 2-rank CPU run failed, measured with transformers 5.3)."""
    return storage if location.startswith("cpu:") else None


torch.serialization.register_package(97, lambda _storage: None, _restore_cpu_with_index)


class RunbookCallback(TrainerCallback):
    def __init__(self) -> None:
        sdk.watch_notice()

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       train_dataloader: DataLoader | None = None, **kwargs: object) -> None:
        self._lr_set = False
        if train_dataloader is not None and (said := hf_data_skip.install(train_dataloader, args)):
            hf_data_skip.say(said)   # before the Trainer's resume skips the batches it trained (hf_data_skip.py)
        self._beat(state, "work")

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                      optimizer: Optimizer | None = None, lr_scheduler: LRScheduler | None = None,
                      **kwargs: object) -> None:
        # A resumed optimizer and scheduler bring the lr they were saved with, and runbook lowers lr after a
        # NaN: make the run config's win, at the first step (on_train_begin may come before HF loads them).
        if getattr(self, "_lr_set", True) or optimizer is None:
            return
        self._lr_set = True
        for i, group in enumerate(optimizer.param_groups):
            saved = group.get("initial_lr")
            if saved and saved != args.learning_rate:
                group["lr"] *= args.learning_rate / saved
                group["initial_lr"] = args.learning_rate
                if lr_scheduler is not None and i < len(getattr(lr_scheduler, "base_lrs", [])):
                    lr_scheduler.base_lrs[i] = args.learning_rate
        if lr_scheduler is not None and hasattr(lr_scheduler, "_last_lr"):   # what HF logs as learning_rate
            lr_scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: object) -> TrainerControl:
        if sdk.notice():   # save the step just finished and stop: 0 steps lost
            control.should_save = control.should_training_stop = True
        if control.should_save and not control.should_log:
            self._announce(args, state)
        self._beat(state, "work")
        return control

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, float] | None = None, **kwargs: object) -> None:
        if logs and "loss" in logs and state.is_world_process_zero:
            sdk.progress(state.global_step, logs["loss"], logs.get("grad_norm"), logs.get("learning_rate"))
        if control.should_save:   # the save follows this log in the same step
            self._announce(args, state)

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    metrics: dict[str, float] | None = None, **kwargs: object) -> None:
        # HF's eval_loss (eval_strategy, an eval_dataset): runbook's val loss, for status and the best checkpoint.
        if metrics and "eval_loss" in metrics and state.is_world_process_zero:
            sdk.validation(state.global_step, metrics["eval_loss"])

    def _announce(self, args: TrainingArguments, state: TrainerState) -> None:
        if state.is_world_process_zero:
            sdk.saving(_output_dir(args) / f"checkpoint-{state.global_step}")

    def _beat(self, state: TrainerState, phase: str) -> None:
        sdk.RANK.heartbeat(state.global_step, phase)   # every rank's, where runbook asks (RUNBOOK_RANKS_DIR)

    @staticmethod
    def finish(trainer: Trainer) -> int:
        """The script's exit status after trainer.train(): 75 after a notice save, else 0 with the model in final/."""
        if sdk.notice() and trainer.state.global_step < trainer.state.max_steps:
            return sdk.NOTICE_EXIT
        final = _output_dir(trainer.args) / "final"
        if trainer.state.is_world_process_zero:
            sdk.saving(final)
        trainer.save_model(str(final))
        if trainer.state.is_world_process_zero:
            trainer.state.save_to_json(str(final / "trainer_state.json"))
        return 0


def _output_dir(args: TrainingArguments) -> Path:
    """TrainingArguments types output_dir as optional; its __post_init__ sets its default in place of None."""
    return Path(args.output_dir or "trainer_output")
