"""`runbook watch`: check everything a run needs before starting, then hand over to the Supervisor."""

from __future__ import annotations

import sys
import traceback
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from runbook.exit_codes import ExitCode
from engine.core.yaml_source import SourceError

if TYPE_CHECKING:   # imported where used: `runbook --help` loads none of them
    from engine.core.config import LoadedConfig
    from engine.core.state import RunPhase
    from engine.core.notifier import Notifier
    from runbook.console import PlainReporter
    from runbook.live_view import LiveView

err = Console(stderr=True, highlight=False, soft_wrap=True)


class Refusal(Exception):
    def __init__(self, code: ExitCode, message: str):
        self.code = code
        super().__init__(message)


def prepare_data(loaded: LoadedConfig, accept_data_change: bool, record_hash: bool = True, make_default: bool = True) -> str:
    """Make the embedded default if asked, check the data and what the trainer needs besides it
    (its adapter's check_environment), and settle `data_hash`. Returns the hash.

    With record_hash=False (drills) the config is only read, never written."""
    from engine.core.config import compute_data_hash
    from engine.trainers.preflight import preflight
    from engine.trainers import adapter_for
    from runbook.default_data import ensure_default_assets

    cfg = loaded.config
    adapter = adapter_for(cfg.trainer.kind)
    if cfg.data.kind == "data-module":   # the trainer's own data module (LitData, ...): its files, its checks
        if problems := preflight(loaded, adapter):
            raise Refusal(ExitCode.BAD_CONFIG, "\nerror: ".join(problems))
        if (fingerprint := adapter.data_fingerprint(loaded)) is None:   # was a data_hash of None: a pydantic error
            raise Refusal(ExitCode.BAD_CONFIG, f"data.kind is data-module in {loaded.path}, but the {adapter.name} "
                          "trainer has no data module of its own to fingerprint; use data.kind: text-files")
        return _settle_hash(loaded, fingerprint, accept_data_change, record_hash)
    train_dir, val_dir, tok_dir = (loaded.data_path(n) for n in ("train_dir", "val_dir", "tokenizer_dir"))
    if cfg.data.make_default and make_default and not any(train_dir.glob("*.txt")):  # never in a dry run
        if train_dir != loaded.resolve(Path("data/stdlib/train")):
            raise Refusal(ExitCode.BAD_CONFIG, f"no .txt files in {train_dir}; make_default only fills the default "
                          "folder data/stdlib/. Put your text there or set data.make_default: false")
        ensure_default_assets(train_dir.parent, tok_dir)
    for name, folder in (("data.train_dir", train_dir), ("data.val_dir", val_dir)):
        if not folder.is_dir():
            raise Refusal(ExitCode.BAD_CONFIG, f"{name}: folder {folder} does not exist ({loaded.path})")
        if not any(folder.glob("*.txt")):
            raise Refusal(ExitCode.BAD_CONFIG, f"{name}: no .txt files in {folder}")
    if problems := preflight(loaded, adapter):   # `runbook check` runs the same
        raise Refusal(ExitCode.BAD_CONFIG, "\nerror: ".join(problems))
    return _settle_hash(loaded, compute_data_hash(train_dir, val_dir), accept_data_change, record_hash)


def _settle_hash(loaded: LoadedConfig, data_hash: str, accept_data_change: bool, record_hash: bool) -> str:
    """Record the first data_hash; refuse a changed one where checkpoints exist, unless accepted."""
    from engine.checkpoints import store as ckpts
    from engine.trainers import adapter_for

    cfg = loaded.config
    if not record_hash:
        return data_hash
    if not cfg.data_hash:
        loaded.write_back({"data_hash": data_hash})
    elif cfg.data_hash != data_hash:
        has_checkpoints = bool(ckpts.list_checkpoints(loaded.out_dir, adapter_for(cfg.trainer.kind).layout))
        if has_checkpoints and not accept_data_change:
            raise Refusal(ExitCode.BAD_CONFIG,
                          f"the training data changed since this run started (data_hash {cfg.data_hash[:19]}… in "
                          f"{loaded.path}, now {data_hash[:19]}…); resuming would mix datasets. Restore the data, "
                          "or pass --accept-data-change to resume anyway")
        loaded.write_back({"data_hash": data_hash})
    return data_hash


def check_trainer(loaded: LoadedConfig) -> None:
    from engine.trainers import adapter_for

    adapter = adapter_for(loaded.config.trainer.kind)
    if not adapter.is_installed():
        raise Refusal(ExitCode.TRAINER_MISSING,
                      f"{adapter.name} is not installed in this Python environment; {adapter.install_hint}")


def read_journal_phase(loaded: LoadedConfig) -> RunPhase:
    """The run phase the journal says; each bad line is one warning (file:line), then skipped."""
    from engine.records.journal import Journal, JournalUnreadable, rebuild

    journal = Journal(loaded.folder.journal)
    try:
        entries = journal.entries()
    except JournalUnreadable as error:
        raise Refusal(ExitCode.NOT_FOUND, f"{error}; fix or move it before watching this run again") from None
    for problem in journal.problems:
        err.print(f"warning: {problem}", markup=False)
    return rebuild(entries).phase


def deliver_leftover_notices(loaded: LoadedConfig) -> None:
    """A run that ended while a receiver was down: deliver what its watcher could not, before saying "nothing to do"."""
    from runbook.notices import NoticesRefused, deliver_pending, pending

    count = pending(loaded)
    if not count:
        return
    err.print(f"delivering {count} notice(s) left in {loaded.run_dir / 'outbox'} ...", markup=False)
    try:
        delivered, left = deliver_pending(loaded)
    except NoticesRefused as refused:
        err.print(f"warning: {refused}", markup=False)
        return
    err.print(f"delivered {delivered} notice(s)" + (f"; {left} still pending (`runbook notify --flush` retries)"
                                                     if left else ""), markup=False)


def run_watch(config_path: Path, dry_run: bool = False, accept_data_change: bool = False, quiet: bool = False,
              as_json: bool = False, debug: bool = False) -> ExitCode:
    from engine.core.lock import RunLocked
    from engine.core.run_dir_owner import RunDirTaken, claim_run_dir
    from engine.checkpoints.out_dir_claim import OutDirBlocked, OutDirTaken
    from engine.process.identity import SecondTrainerRefused
    from engine.language.playbook_set import load_run_playbooks
    from engine.trainers import adapter_for
    from engine.core.state import RunPhase
    from engine.watch.supervisor import Supervisor
    from engine.process.warm_spare import SparePool
    from engine.watch.startup import prestart_spare
    from engine.trainers.run_config import load_config
    from runbook.console import PlainReporter
    from runbook.receivers import make_notifier

    spares = SparePool()   # this watcher's warm spare (trainer.warm_spare): started early, launched by the supervisor
    try:
        loaded = load_config(config_path)
        try:   # before anything reads or writes the run folder: another project's journal is not this run's
            claim_run_dir(loaded.run_dir, loaded.path, loaded.out_dir, record=not dry_run)
        except RunDirTaken as taken:
            raise Refusal(ExitCode.RUN_DIR_TAKEN, str(taken)) from None
        if read_journal_phase(loaded) == RunPhase.COMPLETED:
            if not dry_run:
                deliver_leftover_notices(loaded)
            err.print(f"this run already completed ({loaded.out_dir / 'final'}); nothing to do. To train again, "
                      f"change run_dir and out_dir in {loaded.path} or remove {loaded.run_dir}")
            return ExitCode.OK
        playbooks = load_run_playbooks(loaded, adapter_for(loaded.config.trainer.kind))
        check_trainer(loaded)
        if not dry_run:   # trainer.warm_spare: the first launch's spare imports while the checks below run
            prestart_spare(loaded, spares)
        data_hash = prepare_data(loaded, accept_data_change, record_hash=not dry_run, make_default=not dry_run)
        loaded = loaded.reload()
        notifier: Notifier
        if dry_run:  # no receivers, no outbox folder: a dry run changes nothing
            from engine.core.notifier import NullNotifier

            notifier = NullNotifier()
        else:
            notifier = make_notifier(loaded.config.notifications, loaded.folder.outbox)
    except SourceError as error:
        spares.discard()   # a watcher that refuses to start leaves no spare behind
        err.print("\n".join(error.messages), markup=False)
        return ExitCode.BAD_CONFIG
    except Refusal as refusal:
        spares.discard()
        err.print(f"error: {refusal}", markup=False)
        return refusal.code
    except ValueError as error:  # e.g. a receiver without its secret variable
        spares.discard()
        err.print(f"error: {error}", markup=False)
        return ExitCode.BAD_CONFIG

    live_view: LiveView | None = None
    reporter: LiveView | PlainReporter | None = None
    if sys.stdout.isatty() and not (quiet or as_json):
        from runbook.live_view import LiveView  # a terminal: a live panel; CI, nohup, SLURM: plain lines

        reporter = live_view = LiveView(loaded)
    reporter = reporter or PlainReporter(quiet=quiet, as_json=as_json)
    # The reporter subscribes to the supervisor's event bus beside the notifier (supervisor.bus.subscribe: more).
    supervisor = Supervisor(loaded, playbooks, notifier, data_hash, dry_run=dry_run, events=reporter,
                            spares=spares)
    try:
        with live_view or nullcontext():
            final = supervisor.run()
    except RunLocked as locked:
        err.print(f"error: {locked}", markup=False)
        return ExitCode.LOCKED
    except SecondTrainerRefused as refused:
        err.print(f"error: {refused}", markup=False)
        return ExitCode.SECOND_TRAINER
    except (OutDirTaken, OutDirBlocked) as refused:
        err.print(f"error: {refused}", markup=False)
        return ExitCode.OUT_DIR_TAKEN if isinstance(refused, OutDirTaken) else ExitCode.OUT_DIR_BLOCKED
    except Exception as error:  # noqa: BLE001 - one sentence for people, the traceback with --debug
        if debug:
            traceback.print_exc()
        err.print(f"error: the watcher failed: {type(error).__name__}: {error} (rerun with --debug for details; "
                  "the trainer keeps running and a new `runbook watch` re-attaches)", markup=False)
        return ExitCode.WATCHER_FAILED   # runbook's own fault, not the run's: never 4 (escalated by a playbook)
    if dry_run:
        return ExitCode.OK
    return {
        RunPhase.COMPLETED: ExitCode.OK,
        RunPhase.ESCALATED: ExitCode.ESCALATED,
        RunPhase.STOPPED: ExitCode.INTERRUPTED,
    }.get(final, ExitCode.ESCALATED)
