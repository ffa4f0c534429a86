"""`trainer:` of a Hugging Face Trainer script (kind `hf-trainer`). Imported when a run config loads: no torch."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from engine.core.config import TrainerSettings
from engine.trainers.script import template

# TrainingArguments runbook sets from the run config on every launch: the run config owns them.
MANAGED = ("output_dir", "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "max_steps",
           "save_steps", "save_strategy", "logging_steps", "seed", "resume_from_checkpoint", "logging_nan_inf_filter",
           "save_total_limit", "report_to", "use_cpu", "disable_tqdm")


class HFTrainerSettings(TrainerSettings):
    script: Path = Field(Path("train.py"), description="your training script (relative to the project folder): it "
                         "parses TrainingArguments (HfArgumentParser) and adds runbook.hf_callback.RunbookCallback")
    launcher: list[str] = Field(default_factory=list, description="what starts the script's ranks, each item a template "
                                "(e.g. [\"{python}\", \"-m\", \"torch.distributed.run\", \"--standalone\", "
                                "\"--nproc-per-node\", \"{devices}\"] or [\"accelerate\", \"launch\", "
                                "\"--num_processes\", \"{devices}\"]); empty: `python`, or torchrun with "
                                "trainer.devices ranks when devices > 1")
    args: list[str] = Field(default_factory=list, description="more arguments for the script, each a template "
                            "(the names of trainer.command for kind script)")

    @field_validator("launcher")
    @classmethod
    def _launcher(cls, items: list[str]) -> list[str]:
        for item in items:
            template.check(item)
        return items

    @field_validator("args")
    @classmethod
    def _args(cls, items: list[str]) -> list[str]:
        for item in items:
            template.check(item)
        if problem := args_problem(items):
            raise ValueError(problem)
        return items


def _flag(item: str) -> str | None:
    """PURE. The TrainingArguments field an argv item names (`--learning-rate=1` -> learning_rate), or None."""
    if not item.startswith("--") or len(item) == 2:
        return None
    return item[2:].split("=", 1)[0].replace("-", "_")


def args_problem(items: list[str]) -> str | None:
    """PURE. Why trainer.args cannot go after runbook's flags, or None. argparse takes any unambiguous prefix of a
    flag for the flag (allow_abbrev) and the last value given wins: `--learning_rat 5e-4` after runbook's
    `--learning_rate` would set the lr behind the run config's back."""
    if items and items[0].lower().endswith((".json", ".yaml", ".yml")):
        return (f"{items[0]!r} as the script's first argument is a TrainingArguments file (HfArgumentParser's "
                "parse_json_file / parse_yaml_file, as run_clm reads `train.py args.json`): runbook passes "
                "TrainingArguments as flags (--output_dir, --max_steps, ...), which such a script ignores or refuses; "
                "write the file's settings as flags in trainer.args (those runbook owns in the run config)")
    for i, item in enumerate(items):
        if (name := _flag(item)) is None:
            continue
        if owned := [m for m in MANAGED if m.startswith(name)]:
            said = repr(item)
            if name not in MANAGED:
                said += f" (argparse reads it as --{owned[0]})" if len(owned) == 1 else \
                    f" (an abbreviation of --{', --'.join(owned)})"
            return (f"{said} is set by runbook from the run config (lr, micro_batch_size, batch_size, save_interval, "
                    "max_tokens, seed, out_dir): set it there instead")
        # "save_on" is also save_on_each_node's: argparse takes "save_onl" on for save_only_model.
        if "save_only_model".startswith(name) and len(name) >= len("save_onl") and _truthy(item, items[i + 1:]):
            return (f"{item!r}: a checkpoint without optimizer.pt, scheduler.pt and rng_state.pth; every resume "
                    "(after a preemption, an OOM, a NaN) would silently restart the optimizer and the lr schedule. "
                    "Remove it (runbook prunes old checkpoints with keep_last_k)")
    return None


def _truthy(item: str, rest: list[str]) -> bool:
    """PURE. Does a bool flag come on: `--flag`, `--flag true`, `--flag=yes` (HfArgumentParser's string_to_bool)."""
    value = item.split("=", 1)[1] if "=" in item else (rest[0] if rest and not rest[0].startswith("--") else "true")
    return value.lower() not in ("false", "f", "no", "n", "0")
