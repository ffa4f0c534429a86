"""PURE. The script's argv of one launch: the TrainingArguments flags runbook owns, from the run config."""

from __future__ import annotations

from pathlib import Path

LOGGING_STEPS = 1   # a progress line per optimizer step (the callback prints on each log): tokens/s per line


def launcher_of(launcher: list[str], devices: int, python: str) -> list[str]:
    """PURE. The launcher part of the argv (unrendered): the user's, or torchrun when trainer.devices asks for
    several ranks (an HF Trainer under torchrun is DDP on every rank), or plain python."""
    if launcher:
        return list(launcher)
    if devices > 1:
        return ["{python}", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "{devices}"]
    return ["{python}"]


def hf_argv(script: Path, values: dict, args: list[str], resume_folder: Path | None,
            launcher: list[str] | None = None) -> list[str]:
    """`values`: engine/trainers/script/template.py's for this launch; `args` and `launcher` already rendered
    (`launcher`: what starts the ranks, default plain python)."""
    argv = [*(launcher or [values["python"]]), str(script),
            "--output_dir", str(values["out_dir"]),
            "--per_device_train_batch_size", str(values["micro_batch_size"]),
            # Same effective batch whatever the micro-batch: the oom playbook halves one, this doubles.
            "--gradient_accumulation_steps", str(values["grad_accum"]),
            "--learning_rate", str(values["lr"]), "--max_steps", str(values["max_steps"]),
            "--save_strategy", "steps", "--save_steps", str(values["save_interval"]),
            "--logging_steps", str(LOGGING_STEPS), "--seed", str(values["seed"]), "--report_to", "none", "--disable_tqdm", "true",
            # runbook's nan playbook must see a NaN loss, not HF's average standing in for it.
            "--logging_nan_inf_filter", "false"]
    if values["device"] == "cpu":
        argv += ["--use_cpu", "true"]
    argv += args
    if resume_folder is not None:
        argv += ["--resume_from_checkpoint", str(resume_folder)]
    return argv
