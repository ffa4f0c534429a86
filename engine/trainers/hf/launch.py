"""PURE. The script's argv of one launch: the TrainingArguments flags runbook owns, from the run config."""

from __future__ import annotations

from pathlib import Path


def hf_argv(script: Path, values: dict, args: list[str], resume_folder: Path | None) -> list[str]:
    """`values`: engine/trainers/script/template.py's for this launch; `args` already rendered."""
    argv = [values["python"], str(script),
            "--output_dir", str(values["out_dir"]),
            "--per_device_train_batch_size", str(values["micro_batch_size"]),
            # Same effective batch whatever the micro-batch: the oom playbook halves one, this doubles.
            "--gradient_accumulation_steps", str(values["grad_accum"]),
            "--learning_rate", str(values["lr"]), "--max_steps", str(values["max_steps"]),
            "--save_strategy", "steps", "--save_steps", str(values["save_interval"]),
            "--logging_steps", "1", "--seed", str(values["seed"]), "--report_to", "none", "--disable_tqdm", "true",
            # runbook's nan playbook must see a NaN loss, not HF's average standing in for it.
            "--logging_nan_inf_filter", "false"]
    if values["device"] == "cpu":
        argv += ["--use_cpu", "true"]
    argv += args
    if resume_folder is not None:
        argv += ["--resume_from_checkpoint", str(resume_folder)]
    return argv
