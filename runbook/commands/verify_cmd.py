"""`runbook verify [CONFIG | OUT_DIR]`: the status of every checkpoint, checked without unpickling anything."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from runbook.config_arg import chosen_config, config_option
from runbook.exit_codes import ExitCode

out = Console(highlight=False, soft_wrap=True)


def verify(
    target: Optional[Path] = typer.Argument(None, metavar="CONFIG|OUT_DIR",
                                            help="run config (its out_dir), or a checkpoint folder; default configs/run_config.yaml"),
    config: Optional[Path] = config_option("run config: its out_dir, or with OUT_DIR its trainer's layout"),
) -> None:
    """Verify each checkpoint: the trainer's own check (litgpt: zip CRCs), side files, and the sha256 manifest when sealed."""
    from engine.checkpoints import store as ckpts
    from engine.checkpoints.last_link import last_link_target
    from engine.checkpoints.manifest import has_manifest, verify_checkpoint
    from engine.checkpoints.suspects import quarantined_suspects, suspect_reason
    from engine.trainers import DEFAULT_TRAINER_KIND, adapter_for

    out_dir = target if target is not None and target.is_dir() else None   # a folder is OUT_DIR, a file a config
    kind = DEFAULT_TRAINER_KIND   # OUT_DIR alone reads no run config: the default trainer's layout
    quarantine_dir = None
    if out_dir is None or config is not None:
        from engine.trainers.run_config import load_config

        loaded = load_config(chosen_config(None if out_dir else target, config))
        out_dir, kind, quarantine_dir = out_dir or loaded.out_dir, loaded.config.trainer.kind, loaded.quarantine_dir
    layout = adapter_for(kind).layout
    if not out_dir.is_dir():
        out.print(f"error: {out_dir} is not a folder")
        raise typer.Exit(int(ExitCode.BAD_CONFIG))
    table = Table("checkpoint", "size", "sealed", "status")
    bad = 0
    found = ckpts.list_checkpoints(out_dir, layout)
    last = last_link_target(out_dir)
    last = _resolved(last) if last is not None else None
    suspects = 0
    for ckpt in found:
        result = verify_checkpoint(ckpt)
        bad += not result.ok
        suspect = suspect_reason(ckpt) if result.ok else None
        suspects += suspect is not None
        marker = " (last)" if last is not None and last == _resolved(ckpt.path) else ""
        status = f"CORRUPT: {result.reason}" if not result.ok else f"ok, SUSPECT: {suspect}" if suspect else "ok"
        table.add_row(ckpt.path.name + marker, f"{ckpt.size_bytes() / 1e6:.1f} MB", "yes" if has_manifest(ckpt) else "no",
                      status)
    out.print(table)
    out.print(f"{len(found)} checkpoint(s), {bad} corrupt" + (f", {suspects} suspect (intact, never resumed from)" if suspects else ""))
    for name, why in quarantined_suspects(quarantine_dir) if quarantine_dir is not None else []:
        out.print(f"suspect, in the quarantine: {name}: {why}")
    raise typer.Exit(int(ExitCode.INVALID) if bad else 0)


def _resolved(path: Path) -> Path | None:
    try:
        return path.resolve()
    except (OSError, RuntimeError):   # `last` pointing at itself: a loop resolve() refuses
        return None
