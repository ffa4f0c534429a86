"""`runbook check [CONFIG]`: the preflight `runbook watch` runs before any launch, on its own.

It finds in seconds what would otherwise fail minutes into a run: the config, the playbooks, the
trainer's install, the data folders, the tokenizer, the trainer's own config parser, the devices
and out_dir's room (engine/trainers/preflight.py and the trainer adapter's check_environment).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from runbook.config_arg import chosen_config, config_argument, config_option
from runbook.exit_codes import ExitCode
from engine.core.yaml_source import SourceError

err = Console(stderr=True, highlight=False, soft_wrap=True)


def run_check(config_path: Path) -> ExitCode:
    import time

    from engine.trainers.run_config import load_config
    from engine.language.playbook_set import load_run_playbooks
    from engine.trainers.preflight import preflight, where
    from engine.trainers import adapter_for
    from engine.checkpoints.out_dir_claim import owner_problem
    from engine.checkpoints.last_link import last_in_the_way
    from engine.core.run_dir_owner import RunDirTaken, claim_run_dir

    started = time.monotonic()
    try:
        loaded = load_config(config_path)
        playbooks = load_run_playbooks(loaded, adapter_for(loaded.config.trainer.kind))
    except SourceError as error:
        err.print("\n".join(error.messages), markup=False)
        return ExitCode.BAD_CONFIG
    adapter = adapter_for(loaded.config.trainer.kind)
    if not adapter.is_installed():
        err.print(f"error: {adapter.name} is not installed in this Python environment; {adapter.install_hint}", markup=False)
        return ExitCode.TRAINER_MISSING
    # What `watch` refuses in out_dir (exit 17, 18): another run's marker, a `last` that is not runbook's link;
    # and in run_dir (exit 19): another project's (read only here: check records no owner).
    out_dir_problems = [f"{where(loaded, ('out_dir',))}: {problem}" for problem in
                        (owner_problem(loaded.out_dir, loaded.folder), last_in_the_way(loaded.out_dir)) if problem]
    try:
        claim_run_dir(loaded.run_dir, loaded.path, loaded.out_dir, record=False)
    except RunDirTaken as taken:
        out_dir_problems.append(f"{where(loaded, ('run_dir',))}: {taken}")
    train_dir = loaded.data_path("train_dir")
    if (not out_dir_problems and loaded.config.data.make_default and train_dir == loaded.resolve(Path("data/stdlib/train"))
            and not any(train_dir.glob("*.txt"))):
        typer.echo(f"{loaded.path}: config and {len(playbooks)} playbook(s) valid; the default corpus and tokenizer "
                   "are made by the first `runbook watch`, so the data, tokenizer and trainer checks wait until then")
        return ExitCode.OK
    # `check` is the slow, thorough one: it always has the trainer's parser read the config.
    trainer = loaded.config.trainer.model_copy(update={"preflight_parse": True})
    loaded.config = loaded.config.model_copy(update={"trainer": trainer})
    problems = out_dir_problems + preflight(loaded, adapter)
    for problem in problems:
        err.print(f"error: {problem}", markup=False)
    if problems:
        err.print(f"{len(problems)} problem(s): `runbook watch` would refuse to start this run", markup=False)
        return ExitCode.BAD_CONFIG
    checked = getattr(adapter, "checks", "data, tokenizer, the trainer's config parser, devices and out_dir")
    typer.echo(f"{loaded.path}: ready to launch ({len(playbooks)} playbook(s), {checked} checked in "
               f"{time.monotonic() - started:.1f} s)")
    return ExitCode.OK


def check(config: Optional[Path] = config_argument(), config_opt: Optional[Path] = config_option()) -> None:
    """Preflight: what would fail a launch (data, tokenizer, trainer config, devices, out_dir), in seconds. Exit 0 or 3."""
    raise typer.Exit(int(run_check(chosen_config(config, config_opt))))
