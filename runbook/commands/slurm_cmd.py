"""`runbook slurm submit [CONFIG] [-- sbatch options...]`: submit the run as a SLURM batch job whose step is
`runbook watch CONFIG`, with --requeue, a SIGTERM ahead of the time limit and append-mode output.

sbatch directly, not submitit: the job's step is a command line (`runbook watch`), not a pickled
Python function, and submitit's own requeue (its checkpoint protocol, its signal handler in the
job) would compete with the watcher's. One script anyone can read in run_dir/slurm/job.sbatch is
what is submitted; --dry-run prints it and submits nothing.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from engine.core.text_safety import for_display
from runbook.config_arg import chosen_config, config_argument, config_option
from runbook.exit_codes import ExitCode

slurm_app = typer.Typer(no_args_is_help=True, help="Run under SLURM: submit the run as a self-requeueing batch job.")
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def runbook_executable() -> str:
    """The `runbook` of this environment (the job runs it on the compute node: a shared filesystem)."""
    beside = Path(sys.executable).parent / "runbook"
    return str(beside) if beside.exists() else (shutil.which("runbook") or "runbook")


def stray_word(options: list[str]) -> str | None:
    """PURE. The first word that is no option and follows no option that could take it as its value."""
    for i, word in enumerate(options):
        if word.startswith("-"):
            continue
        before = options[i - 1] if i else ""
        if not before.startswith("-") or "=" in before or (len(before) > 2 and not before.startswith("--")):
            return word
    return None


@slurm_app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def submit(
    ctx: typer.Context,
    config: Optional[Path] = config_argument(),
    config_opt: Optional[Path] = config_option(),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the job script and the sbatch command; submit nothing"),
) -> None:
    """Submit `runbook watch CONFIG` as a batch job (--requeue, SIGTERM slurm.signal_lead_s before the time
    limit, output appended in run_dir/slurm/). Options after CONFIG (after `--` for ones like -c) go to sbatch.
    Prints the job id. Refuses (exit 5) while a job of this run is still pending or running."""
    from engine.trainers.run_config import load_config
    from engine.core.durable import atomic_write_text
    from engine.cluster.slurm import job_script, live_job_refusal, parse_job_id, submit_argv
    from engine.cluster.slurm_commands import query_jobs, run_command
    from engine.cluster.slurm_records import Submission, recorded_job_ids, slurm_dir, write_submission
    from engine.core.yaml_source import SourceError

    options = [a for a in ctx.args if a != "--"]
    if config is not None and str(config).startswith("-"):   # `submit --time=60`: an sbatch option, not a config
        options, config = [str(config), *options], None
    config_path = chosen_config(config, config_opt)
    try:
        loaded = load_config(config_path)
    except SourceError as error:
        err.print("\n".join(error.messages), markup=False)
        raise typer.Exit(int(ExitCode.BAD_CONFIG)) from None
    settings, grace = loaded.config.slurm, loaded.config.watch.grace_period_s
    if settings.signal_lead_s <= grace:
        err.print(f"error: slurm.signal_lead_s ({settings.signal_lead_s} s) must exceed watch.grace_period_s "
                  f"({grace:g} s): the trainer's notice save needs that long before SLURM kills the job "
                  f"({loaded.path})", markup=False)
        raise typer.Exit(int(ExitCode.BAD_CONFIG))
    if stray := stray_word(options):   # sbatch would take it for the script (ours comes last)
        err.print(f"error: {stray!r} is neither an sbatch option nor its value; give one run config, then sbatch "
                  "options (`--time=60`, `-p debug`)", markup=False)
        raise typer.Exit(int(ExitCode.USAGE))
    folder = slurm_dir(loaded.run_dir)
    if any(ch.isspace() or ch == "%" for ch in str(folder) + str(loaded.path)):   # #SBATCH lines split on blanks; % is a pattern
        err.print(for_display(f"error: the run folder {folder} or the config {loaded.path} has a blank or '%' in its "
                              "path: #SBATCH lines cannot carry it; move the project or set run_dir"), markup=False)
        raise typer.Exit(int(ExitCode.BAD_CONFIG))
    script_text = job_script(project_dir=loaded.project_dir, config_path=loaded.path, runbook=runbook_executable(),
                             output=folder / "job-%j.out", settings=settings,
                             job_name=settings.job_name or f"runbook-{loaded.run_dir.name}",
                             nodes=loaded.config.trainer.num_nodes)
    script = folder / "job.sbatch"
    argv = submit_argv(script, options)
    if dry_run:   # paths, the run folder's name and sbatch options may hold escapes: shown, never acted on
        out.print(for_display(script_text), end="", markup=False)
        out.print(for_display(f"# would run: {' '.join(argv)}"), markup=False)
        return
    if shutil.which("sbatch") is None:
        err.print("error: sbatch is not on PATH: submit from a SLURM login node (or use --dry-run to see the script)",
                  markup=False)
        raise typer.Exit(int(ExitCode.NOT_FOUND))
    # One job per run: a second one's watcher would only find the run folder locked (exit 5) after its wait
    # in the queue. --dry-run (above) submits nothing, so it neither asks nor refuses.
    refusal, warnings = live_job_refusal(query_jobs(recorded_job_ids(loaded.run_dir), settings.command_timeout_s))
    for warning in warnings:
        err.print(f"warning: {warning}", markup=False)
    if refusal:
        err.print(f"error: {refusal} ({loaded.run_dir})", markup=False)
        raise typer.Exit(int(ExitCode.LOCKED))
    folder.mkdir(parents=True, exist_ok=True)   # the output's folder must exist when the job starts
    atomic_write_text(script, script_text)
    script.chmod(0o755)
    answer = run_command(argv, settings.command_timeout_s, cwd=loaded.project_dir)
    job_id = parse_job_id(answer.text) if answer.ok else None
    if job_id is None:
        err.print(for_display(f"error: sbatch did not submit the job: {answer.text.strip() or 'no job id printed'}"),
                  markup=False)
        raise typer.Exit(int(ExitCode.BAD_CONFIG))
    write_submission(loaded.run_dir, Submission(job_id=job_id, submitted_at=time.time(), script=str(script), argv=argv))
    print(job_id)
