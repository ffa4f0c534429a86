"""`runbook init --from-litgpt PRETRAIN_YAML [PROJECT_DIR]`: a run config over the user's litgpt config.

The litgpt YAML stays the one source of truth (trainer.litgpt_config): runbook reads its
hyperparameters, data and tokenizer from it and writes a recovery's changes back into it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from runbook.config_arg import DEFAULT_CONFIG
from runbook.exit_codes import ExitCode

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
    from_litgpt: Path = typer.Option(..., "--from-litgpt", help="your litgpt pretrain YAML (litgpt pretrain --config FILE)"),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help=f"the run config to write, default PROJECT_DIR/{DEFAULT_CONFIG}"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing run config"),
) -> None:
    """Start from your litgpt pretrain config: write a run config that uses it as the run's base."""
    from engine.trainers.run_config import load_config
    from engine.core.yaml_source import SourceError

    if not from_litgpt.is_file():
        err.print(f"error: --from-litgpt: no file {from_litgpt}", markup=False)
        raise typer.Exit(int(ExitCode.NOT_FOUND))
    target = config or project_dir / DEFAULT_CONFIG
    if target.exists() and not force:
        err.print(f"error: {target} already exists; pass --force to overwrite it or choose another PROJECT_DIR", markup=False)
        raise typer.Exit(int(ExitCode.BAD_CONFIG))
    target.parent.mkdir(parents=True, exist_ok=True)
    previous = target.read_text() if target.exists() else None
    target.write_text(TEMPLATE.format(litgpt=yaml_string(_relative(from_litgpt, target.resolve().parent.parent))))
    try:
        loaded = load_config(target)
    except SourceError as error:
        target.unlink() if previous is None else target.write_text(previous)
        err.print("\n".join(error.messages), markup=False)
        raise typer.Exit(int(ExitCode.BAD_CONFIG)) from None
    cfg = loaded.config
    typer.echo(f"wrote {target} over {from_litgpt}: micro_batch_size {cfg.micro_batch_size}, batch_size "
               f"{cfg.batch_size}, lr {cfg.lr}, max_tokens {cfg.max_tokens}, block size {cfg.model.block_size}, "
               f"data {loaded.data_path('train_dir') if cfg.data.kind == 'text-files' else 'from its own data module'}")
    missing = missing_data_paths(loaded, from_litgpt, Path.cwd())
    for line in missing:
        err.print(f"warning: {line}", markup=False)
    if missing:
        err.print(f"the run config was written; make these folders exist where it says, or write absolute paths in "
                  f"{from_litgpt}, before `runbook watch` (`runbook check {target}` checks them)", markup=False)
    typer.echo(f"next: runbook check {target}   then: runbook watch {target}")


def missing_data_paths(loaded, litgpt: Path, cwd: Path) -> list[str]:
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
