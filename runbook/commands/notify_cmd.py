"""`runbook notify [CONFIG] [--flush]`: the notices still waiting in the run's outboxes; deliver them.

A watcher that ended while a receiver was down leaves its notices in `<run_dir>/outbox/` (Slack's) and
`<run_dir>/outbox/<receiver>/`. Without
`--flush` this only counts them; with it they are delivered in order, replies in their incident's
thread. Exit 0 when nothing is left, 11 when some are still pending (Slack still down), 5 when a
watcher holds the run folder (it delivers them itself), 3 when Slack is not configured.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from runbook.config_arg import chosen_config, config_argument, config_option
from runbook.exit_codes import ExitCode
from engine.core.yaml_source import SourceError

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def notify(
    config: Optional[Path] = config_argument(),
    config_opt: Optional[Path] = config_option(),
    flush: bool = typer.Option(False, "--flush", help="deliver the pending notices now"),
    timeout: Optional[float] = typer.Option(
        None, "--timeout", min=0, help="seconds to keep trying (default: the receivers' delivery_timeout_s)"),
) -> None:
    """Count the notices still waiting in the run's outboxes; --flush delivers them, in order and in their threads."""
    from engine.trainers.run_config import load_config
    from runbook.notices import NoticesRefused, deliver_pending, outbox_dir
    from runbook.notices import summary as notices_summary
    from runbook.report import duration

    try:
        loaded = load_config(chosen_config(config, config_opt))
    except SourceError as error:
        err.print("\n".join(error.messages), markup=False)
        raise typer.Exit(int(ExitCode.BAD_CONFIG)) from None
    folder = outbox_dir(loaded)
    summary = notices_summary(loaded)
    if not flush or not summary["pending"]:
        since = (f", oldest queued {duration(time.time() - summary['oldest_queued_at'])} ago"
                 if summary["oldest_queued_at"] is not None else "")
        out.print(f"{summary['pending']} notice(s) pending in {folder}{since}"
                  + (f"; {summary['parked']} set aside in {folder / 'failed'} (rejected by the receiver or unreadable)" if summary["parked"] else ""),
                  markup=False)
        raise typer.Exit(int(ExitCode.UNDELIVERED if summary["pending"] and flush else ExitCode.OK))
    try:
        delivered, left = deliver_pending(loaded, timeout)
    except NoticesRefused as refused:
        err.print(f"error: {refused}", markup=False)
        raise typer.Exit(int(refused.code)) from None
    out.print(f"delivered {delivered} notice(s)" + (f"; {left} still pending in {folder} (the receivers did not accept them "
                                                     "in time; run `runbook notify --flush` again later)" if left else ""),
              markup=False)
    raise typer.Exit(int(ExitCode.UNDELIVERED if left else ExitCode.OK))
