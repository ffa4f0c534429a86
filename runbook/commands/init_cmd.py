"""`runbook init [PROJECT_DIR] --from-litgpt PRETRAIN_YAML | --from-hf SCRIPT | --from-script SCRIPT`: a whole run
config for the run the user already has.

--from-litgpt: the litgpt YAML stays the one source of truth (trainer.litgpt_config): runbook reads its
hyperparameters, data and tokenizer from it and writes a recovery's changes back into it.
--from-hf: a Hugging Face Trainer script (kind hf-trainer): runbook passes the TrainingArguments it owns.
--from-script: any training script (kind script): its command, templated with the run config's values.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console

from runbook.config_arg import DEFAULT_CONFIG
from runbook.exit_codes import ExitCode

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig

err = Console(stderr=True, highlight=False, soft_wrap=True)

TEMPLATE = """\
# runbook run config over your litgpt pretrain config ({litgpt}). Relative paths here and in it
# resolve against the project folder (the folder above configs/), where litgpt runs.
# micro_batch_size, batch_size (train.global_batch_size), lr (optimizer.init_args.lr), save_interval,
# max_tokens, seed, out_dir, the TextFiles folders and tokenizer_dir are read from the litgpt config,
# and a recovery writes a changed value back there (comments kept). Everything else in it (model_name
# or model_config, eval, optimizer, logger_name, precision, ...) reaches litgpt as you wrote it.
keep_last_k: 3           # checkpoints kept when pruning (plus the best by val loss)
run_log: docs/run-log.md
run_dir: runs/pretrain   # journal, incident records, trainer logs, data cache, Slack outbox

trainer:
  kind: litgpt
  litgpt_config: {litgpt}
  device: auto           # auto: CUDA when torch sees a GPU, else CPU
  extra: {{}}              # litgpt keys merged over your config for runbook only (e.g. a smaller model to try it)

watch:
  hang_timeout_s: 600    # no progress line for this long = hang (start-up: no output, CPU or I/O for this long)
  startup_timeout_s: 14400   # the longest preprocessing + model build may take to the first progress line
  save_timeout_s: 3600   # the longest a checkpoint save may take (a save that shows no life is a hang sooner)
"""


SCRIPT_COMMON = """\
# The run's numbers: runbook owns them and passes them to the script on every launch (a recovery changes
# micro_batch_size or lr here). batch_size is the global batch over every rank.
micro_batch_size: 4
batch_size: 32
lr: 3.0e-4
save_interval: 500       # optimizer steps between checkpoints
max_tokens: 1000000000   # max_steps = max_tokens / (batch_size x block_size)
seed: 1337
keep_last_k: 3           # checkpoints kept when pruning (plus the best by val loss)
out_dir: checkpoints/run
run_log: docs/run-log.md
run_dir: runs/run        # journal, incident records, trainer logs, Slack outbox
model:
  block_size: 1024       # sequence length: the tokens per sample the script trains on
data:
  train_dir: data/train  # folders of .txt files (RUNBOOK_TRAIN_DIR / RUNBOOK_VAL_DIR in the script's environment)
  val_dir: data/val
  make_default: false
"""

HF_TEMPLATE = """\
# runbook run config for your Hugging Face Trainer script ({script}), kind hf-trainer (docs/trainers.md).
# The script parses TrainingArguments (HfArgumentParser), adds runbook.hf_callback.RunbookCallback() and
# ends with sys.exit(RunbookCallback.finish(trainer)); `runbook check` runs its parser on runbook's flags.
""" + SCRIPT_COMMON + """\
trainer:
  kind: hf-trainer
  script: {script}
  device: auto
  devices: 1             # > 1: torchrun starts that many ranks (or set launcher: [accelerate, launch, ...])
  args: []               # your script's own flags (runbook's TrainingArguments flags are refused here)
watch:
  hang_timeout_s: 600
"""

SCRIPT_TEMPLATE = """\
# runbook run config for your training script ({script}), kind script (docs/trainers.md). The script calls
# runbook.sdk: sdk.progress(step, loss) after each optimizer step, sdk.saving(folder) before writing
# <out_dir>/step-<6 digits>/state.pt, sdk.resumed(path), and saves + exits 75 on a notice.
""" + SCRIPT_COMMON + """\
trainer:
  kind: script
  device: auto
  # Each item a template ({{out_dir}}, {{resume}}, {{micro_batch_size}}, {{batch_size}}, {{grad_accum}}, {{lr}},
  # {{max_steps}}, {{save_interval}}, {{seed}}, {{block_size}}, {{train_dir}}, {{val_dir}}, {{devices}}, ...): rename
  # the flags to your script's. Several ranks: ["{{python}}", "-m", "torch.distributed.run", "--standalone",
  # "--nproc-per-node", "2", {script}, ...]
  command: ["{{python}}", {script}, "--out", "{{out_dir}}", "--train-dir", "{{train_dir}}", "--steps", "{{max_steps}}",
            "--save-interval", "{{save_interval}}", "--micro-batch", "{{micro_batch_size}}", "--batch", "{{batch_size}}",
            "--lr", "{{lr}}", "--seed", "{{seed}}"]
  resume_args: ["--resume", "{{resume}}"]
  weights_key: model     # the model's state dict inside state.pt (null: the file is the state dict)
watch:
  hang_timeout_s: 600
"""


def yaml_string(text: str) -> str:
    """PURE. `text` as one double-quoted YAML scalar, written by ruamel.yaml itself: a file named `true`,
    `null`, `~`, `&a.yaml`, `#x`, `a: b` or `[x]` (or holding a quote, backslash or line break) must read
    back as that name, not as a bool, a null, an alias or a comment that silently drops the user's config."""
    import io

    from ruamel.yaml import YAML
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    yaml = YAML(typ="rt")
    yaml.width = 1 << 20   # one line, however long the path
    buffer = io.StringIO()
    yaml.dump({"v": DoubleQuotedScalarString(text)}, buffer)
    return buffer.getvalue().removeprefix("v: ").rstrip("\n")


def _relative(path: Path, project_dir: Path) -> str:
    path, project_dir = path.resolve(), project_dir.resolve()
    return os.path.relpath(path, project_dir) if path.is_relative_to(project_dir) else str(path)


def init(
    project_dir: Path = typer.Argument(Path("."), metavar="[PROJECT_DIR]", help="the project folder (default: here)"),
    from_litgpt: Optional[Path] = typer.Option(None, "--from-litgpt", help="your litgpt pretrain YAML (litgpt pretrain --config FILE)"),
    from_hf: Optional[Path] = typer.Option(None, "--from-hf", help="your Hugging Face Trainer script (kind hf-trainer)"),
    from_script: Optional[Path] = typer.Option(None, "--from-script", help="your own training script (kind script)"),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help=f"the run config to write, default PROJECT_DIR/{DEFAULT_CONFIG}"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing run config"),
) -> None:
    """Start from the run you have: your litgpt pretrain config, HF Trainer script or training script."""
    from engine.trainers.run_config import load_config
    from engine.core.yaml_source import SourceError

    given = [(flag, path) for flag, path in (("--from-litgpt", from_litgpt), ("--from-hf", from_hf),
                                             ("--from-script", from_script)) if path is not None]
    if len(given) != 1:
        err.print("error: give exactly one of --from-litgpt YAML, --from-hf SCRIPT, --from-script SCRIPT", markup=False)
        raise typer.Exit(int(ExitCode.BAD_CONFIG))
    (flag, source), = given
    if not source.is_file():
        err.print(f"error: {flag}: no file {source}", markup=False)
        raise typer.Exit(int(ExitCode.NOT_FOUND))
    target = config or project_dir / DEFAULT_CONFIG
    if target.exists() and not force:
        err.print(f"error: {target} already exists; pass --force to overwrite it or choose another PROJECT_DIR", markup=False)
        raise typer.Exit(int(ExitCode.BAD_CONFIG))
    target.parent.mkdir(parents=True, exist_ok=True)
    previous = target.read_text() if target.exists() else None
    relative = yaml_string(_relative(source, target.resolve().parent.parent))
    template = {"--from-litgpt": TEMPLATE.format(litgpt=relative), "--from-hf": HF_TEMPLATE.format(script=relative),
                "--from-script": SCRIPT_TEMPLATE.format(script=relative)}[flag]
    target.write_text(template)
    try:
        loaded = load_config(target)
    except SourceError as error:
        target.unlink() if previous is None else target.write_text(previous)
        err.print("\n".join(error.messages), markup=False)
        raise typer.Exit(int(ExitCode.BAD_CONFIG)) from None
    cfg = loaded.config
    if flag != "--from-litgpt":
        typer.echo(f"wrote {target} for {source} (kind {cfg.trainer.kind}): set micro_batch_size, batch_size, lr, "
                   f"save_interval, max_tokens, model.block_size and data.train_dir/val_dir to your run's"
                   + ("; rename trainer.command's flags to your script's" if flag == "--from-script" else ""))
        typer.echo(f"next: runbook check {target}   then: runbook watch {target}")
        return
    typer.echo(f"wrote {target} over {source}: micro_batch_size {cfg.micro_batch_size}, batch_size "
               f"{cfg.batch_size}, lr {cfg.lr}, max_tokens {cfg.max_tokens}, block size {cfg.model.block_size}, "
               f"data {loaded.data_path('train_dir') if cfg.data.kind == 'text-files' else 'from its own data module'}")
    missing = missing_data_paths(loaded, source, Path.cwd())
    for line in missing:
        err.print(f"warning: {line}", markup=False)
    if missing:
        err.print(f"the run config was written; make these folders exist where it says, or write absolute paths in "
                  f"{source}, before `runbook watch` (`runbook check {target}` checks them)", markup=False)
    typer.echo(f"next: runbook check {target}   then: runbook watch {target}")


def missing_data_paths(loaded: LoadedConfig, litgpt: Path, cwd: Path) -> list[str]:
    """One sentence per data or tokenizer folder the written config names that does not exist: where the
    value from the litgpt YAML resolves (against the project folder, not where litgpt was run from), and
    where it does exist when that is relative to the current folder instead."""
    keys = ("train_dir", "val_dir", "tokenizer_dir") if loaded.config.data.kind == "text-files" else ("tokenizer_dir",)
    lines = []
    for key in keys:
        value = Path(getattr(loaded.config.data, key))
        where = loaded.data_path(key)
        if where.is_dir():
            continue
        line = (f"data.{key} `{value}` (from {litgpt}) resolves to {where}, against the project folder "
                f"{loaded.project_dir.resolve()}, and that folder does not exist")
        here = (cwd / value).resolve()
        if not value.is_absolute() and here.is_dir() and here != where:
            line += (f"; it does exist relative to where you ran this ({here}): relative paths in the litgpt config "
                     "resolve against the project folder, so run litgpt from there too or make these paths absolute")
        lines.append(line)
    return lines
