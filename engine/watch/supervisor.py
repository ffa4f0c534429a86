"""The watch loop: observe -> decide -> run the incident -> record. One Supervisor per run folder.

Reads top to bottom: `run()` starts or re-attaches the trainer, then `tick()` repeats until the run
reaches a terminal phase. Matching and planning are pure (matcher.py, planner.py). The loop talks
to a few collaborators and reaches into none of them: the trainer control (launch, stop, the run
config in force), the checkpoint catalog (verified steps, quarantine, prune), the observer (log
lines -> metrics -> snapshots) and the incident runner (open, act, close, report).
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Protocol, TypeVar

from engine.core.config import LoadedConfig
from engine.core.events import (EventBus, ExpressionError, Launch, NotifierListener, Publish, Transition,
                                WatchWarning, ignore)
from engine.observe.advice import run_save_interval_advice
from engine.watch.dry_run import observe_without_acting
from engine.records.held_writes import Backlog, HeldRunLog, HoldingStore
from engine.watch.incident_runner import IncidentRunner
from engine.records.attempts import AttemptHistory
from engine.records.journal import Journal, JournalReplay
from engine.checkpoints.catalog import CheckpointCatalog
from engine.core.lock import RunLock
from engine.checkpoints.out_dir_claim import OutDirClaim
from engine.language.matcher import MatchMemory, attempt_number, decide, judging_completion
from engine.language.playbook import Playbook
from engine.core.notifier import Notifier
from engine.observe.evidence import EvidenceGatherer
from engine.observe.observer import Observer
from engine.watch.parts import WatchParts
from engine.watch.observation import Observation
from engine.cluster.slurm_watch import SlurmAllocation
from engine.watch.startup import start_or_continue
from engine.watch.stopping import stop_on_request
from engine.core.state import TERMINAL_PHASES, RunPhase, StateSnapshot
from engine.process.trainer_control import TrainerControl
from engine.trainers import adapter_for
from engine.process.warm_spare import SparePool
from engine.core.write_trouble import WriteTrouble
from engine.watch import services as services_of_watch

class _Service(Protocol):
    def shutdown(self) -> None: ...


_S = TypeVar("_S", bound=_Service)

DEAD_TRAINER_GRACE_OBSERVATIONS = 5   # a dead trainer nobody's playbook claims is escalated after this


class Supervisor:
    def __init__(self, loaded: LoadedConfig, playbooks: list[Playbook], notifier: Notifier, data_hash: str,
                 dry_run: bool = False, events: Publish | None = None,
                 spares: SparePool | None = None):
        self.playbooks = playbooks
        self.notifier = notifier
        self.dry_run = dry_run
        # The loop's one exit, heard in this order: the run log (an incident's entry is written before its close
        # is announced), the notifier, then whoever the caller subscribed (console, live view, --json); the
        # metrics endpoint subscribes when it starts (engine/watch/services.py).
        self.bus = EventBus()
        self.events: Publish = self.bus.publish
        self.trouble = WriteTrouble(self.events)   # a full run folder: one warning per kind of write
        run_log = HeldRunLog(lambda: self.control.loaded, self.trouble, self.events)
        for listener in (run_log.hear, NotifierListener(notifier), events or ignore):
            self.bus.subscribe(listener)
        adapter = adapter_for(loaded.config.trainer.kind)
        folder = loaded.folder
        self.journal = Journal(folder.journal, self.trouble)
        self.lock = RunLock(loaded.run_dir)
        self.out_dir_claim = OutDirClaim(loaded.out_dir, folder, loaded.path)   # one run per out_dir
        self.control = TrainerControl(loaded, adapter, self.journal, data_hash, self.trouble, spares)
        self.catalog = CheckpointCatalog(loaded.out_dir, folder, loaded.quarantine_dir, adapter,
                                         journal=None if dry_run else self.journal, read_only=dry_run)
        self.observer = Observer(adapter, loaded.out_dir, self.control.progress_meaning,
                                 evidence=EvidenceGatherer(loaded.out_dir, loaded.run_dir, self.catalog.resume_file_corrupt))
        self.observation = Observation(self.control, self.observer, self.catalog, self.journal, self.events)
        store = HoldingStore(loaded.run_dir, loaded.project_dir / ".runbook" / "incident-counter", self.trouble)
        self.backlog = Backlog(store, self.journal, run_log)   # what a full disk held back, written each tick
        self.parts = WatchParts(
            control=self.control, catalog=self.catalog, journal=self.journal, store=store, notifier=notifier,
            events=self.events, session=self, held=self.backlog.held)
        self.incidents = IncidentRunner(self.parts)
        self.phase = RunPhase.STARTING
        self.memory = MatchMemory()
        self.history = AttemptHistory()   # the journal's, from start_or_continue (or the dry run) on
        self.dead_observations = 0
        self._blind_warned: int | None = None   # the launch a "no runbook line" warning was given for
        self.stop_requested: str | None = None
        self._exit_journaled: int | None = None
        self.recovery_lock = threading.Lock()   # upkeep jobs skip while the watch loop holds it
        self.slurm = None if dry_run else SlurmAllocation.from_environment(loaded, self.journal, self.events)

    @property
    def loaded(self) -> LoadedConfig:
        return self.control.loaded   # a recovery may have rewritten the run config

    # --- the loop ------------------------------------------------------------------------------
    def run(self) -> RunPhase:
        if self.dry_run:
            return observe_without_acting(self)
        # Every service the loop starts is stopped by this one stack, in reverse order, however the loop ends.
        with ExitStack() as services:
            if (slurm := self.slurm) is not None:   # registered first, so it runs after the lock's release:
                services.callback(lambda: slurm.finished(self.phase))   # a requeue's next allocation takes it
            services.enter_context(self.lock)
            services.enter_context(self.out_dir_claim)   # before anything seals, resumes or prunes in out_dir
            services.callback(self.notifier.close)
            self.install_signal_handlers()
            if self.slurm is not None:
                self.slurm.started()
            services.callback(self.control.release_tmpdir_link)   # after the spare's discard (callbacks unwind in reverse)
            services.callback(self.control.spares.discard)   # a warm spare nobody will launch (engine/process/warm_spare.py)
            endpoint = self._start(services, lambda: services_of_watch.metrics_endpoint(
                self.loaded.config.watch.metrics, self.loaded.run_dir, self.catalog, self.journal, self.bus,
                (self.phase, self.observation.last)))
            if endpoint is not None:   # unwound before its stop: an escalation stays served for a scrape
                services.callback(endpoint.linger, lambda: self.stop_requested is not None)
            with self.recovery_lock:
                start_or_continue(self)
            if self.phase not in TERMINAL_PHASES:
                self._start(services, lambda: services_of_watch.upkeep(
                    self.loaded.config.upkeep, self.parts, self.recovery_lock, self.events, self.trouble))
                self._start(services, lambda: services_of_watch.notice_poller(
                    self.loaded.config.watch.cloud_notices, self.request_stop, self.events))
            services.callback(self._last_catch_up)
            services.callback(self.incidents.flush_awaiting, "the watcher ended before the trainer made progress")
            while self.phase not in TERMINAL_PHASES:
                if self.stop_requested:
                    self._stop_watching(self.stop_requested)
                    break
                with self.recovery_lock:
                    self.tick()
                time.sleep(self.loaded.config.watch.poll_interval_s)
            return self.phase

    @staticmethod
    def _start(services: ExitStack, make: Callable[[], _S | None]) -> _S | None:
        """Start an optional service (None: not configured, or not for this run) and register its stop."""
        service = make()
        if service is not None:
            services.callback(service.shutdown)
        return service

    def observe(self, retain: bool = False) -> StateSnapshot:
        """One observation (engine/watch/observation.py): the process, its log, the checkpoints -> a snapshot."""
        return self.observation.take(self.phase, retain)

    def tick(self) -> None:
        self.backlog.catch_up()
        snapshot = self.observe(retain=True)
        self.incidents.check_progress(self.observer.tracker)
        self._lift_diagnostics_when_healthy()
        self._warn_when_blind(snapshot)
        trainer = snapshot.trainer
        if trainer.exit_pending:
            return   # it ended a moment ago and its exit is being recorded: decide on the exit, next tick
        if trainer.awaiting_first_failure:
            return   # a group failing under its launcher: its report names the first failed rank (bounded wait)
        if not trainer.alive and trainer.pid is not None and trainer.pid != self._exit_journaled:
            self._exit_journaled = trainer.pid
            self.journal.append("trainer_exited", pid=trainer.pid, exit_code=trainer.exit_code, signal=trainer.signal)
        # exit_code is None only when nobody could record it (the launcher died too, or an old run folder).
        completed = not trainer.alive and trainer.exit_code in (0, None) and self.catalog.final_exists()
        # A completed run is judged by the playbooks that name exit code 0 alone (a loss that ended diverged is
        # not a finished run); none fires: completed.
        outcome = decide(snapshot, self.loaded.config, judging_completion(self.playbooks) if completed else self.playbooks,
                         self.memory, self.history)
        if completed and (outcome.decision is None or outcome.decision.kind not in ("recover", "escalate")):
            self.complete()
            return
        self.memory = outcome.memory
        for error in outcome.errors:
            self.events(ExpressionError(str(error)))
        decision = outcome.decision
        if decision is not None and decision.kind in ("recover", "escalate"):
            self.dead_observations = 0
            self.incidents.handle(decision, snapshot, self.attempt(decision.playbook), self.loaded.config)
            self.reread_history()   # limits count this firing from now on
        elif not trainer.alive and decision is None:
            self.dead_observations += 1
            if self.dead_observations >= DEAD_TRAINER_GRACE_OBSERVATIONS:
                self.incidents.escalate_unclaimed(snapshot, self.loaded.config)
                self.reread_history()

    def _warn_when_blind(self, snapshot: StateSnapshot) -> None:
        """A user's script that prints but never speaks runbook's contract is supervised blind (no progress, no saves
        to prune, no ranks): say so once per launch, with what to add."""
        hint = getattr(self.control.adapter, "contract_hint", None)
        launch = self.control.launches
        if hint is None or self._blind_warned == launch or not snapshot.trainer.alive or not snapshot.tail:
            return
        ran = snapshot.time - self.observer.launched_at
        if self.observer.tracker.progress_since_launch == 0 and ran >= self.loaded.config.watch.no_contract_warning_s \
                and not any(line.startswith("runbook:") for line in snapshot.tail):
            self._blind_warned = launch
            self.events(WatchWarning(f"launch {launch} has printed {len(snapshot.tail)}+ lines in {ran:.0f} s but no "
                        f"line runbook reads: it sees no progress, no saves and no ranks of this run; {hint}"))
            self.journal.append("blind_launch", launch=launch, seconds=round(ran, 1))

    def _lift_diagnostics_when_healthy(self) -> None:
        """A remedy's diagnostic variables (NCCL_DEBUG, TORCH_DISTRIBUTED_DEBUG) served the launch after the
        incident; once it trained healthily the later launches go without them."""
        steps, healthy = self.observer.tracker.progress_since_launch, self.loaded.config.watch.diagnostics_healthy_steps
        if self.control.env_effect_due(healthy, steps):   # what the change cost: throughput before and after
            effect = self.control.record_env_effect(self.observer.tracker.throughput())
            before, after = effect["tokens_per_sec_before"], effect["tokens_per_sec_after"]
            self.events(WatchWarning(f"{', '.join(effect['names'])} ({effect['incident']}): throughput "
                        f"{'-' if before is None else f'{before:,.0f}'} tok/s before, "
                        f"{'-' if after is None else f'{after:,.0f}'} tok/s after"))
        if self.control.diagnostics_due(healthy, steps):
            why = f"launch {self.control.launches} trained {steps} steps healthily"
            lifted = self.control.lift_diagnostics(why)
            self.events(WatchWarning(f"diagnostics lifted for later launches ({why}): " + ", ".join(sorted(lifted))))

    def _last_catch_up(self) -> None:
        if self.dry_run:
            return
        lost = self.backlog.catch_up()
        if lost:   # the disk never came back: say exactly what the run folder is missing
            self.events(WatchWarning("the watcher ends with " + ", ".join(f"{n} {kind}" for kind, n in lost.items())
                        + " still unwritten (the disk is full); they are lost: `runbook status` may miss the journal's tail"))

    def status(self) -> dict:
        """What the heartbeat says of the run (upkeep)."""
        metrics = self.observation.last.metrics if self.observation.last is not None else None
        return {"run_state": self.phase.value, "launches": self.control.launches,
                "step": metrics.step if metrics else None, "tokens": metrics.tokens if metrics else None,
                "tokens_per_sec": metrics.tokens_per_sec if metrics else None}

    def complete(self) -> None:
        self.observation.retain_at_completion()
        self.transition(RunPhase.COMPLETED, "trainer exited 0 and final/ exists")

    # --- the session port (engine/language/actions/ports.SessionPort): what actions ask of the loop --
    @property
    def divergences(self) -> list[int]:
        return self.observer.tracker.divergences   # the next divergence's state.metrics.previous_bad_step

    def best_val_step(self) -> int | None:
        return self.observation.best_val_step()   # the one source of "best" (the observer's tracker)

    def saving_from(self) -> int | None:
        return self.observation.saving_from()   # a live trainer may still be writing saves from this step on

    def launch(self, resume_file: Path | None) -> None:
        process = self.control.launch(resume_file)
        self.observer.evidence.launched(process.pid, resume_file)   # the OOM-kill counter before anything ran
        resumed_step = self.catalog.layout.step_in_path(str(resume_file)) if resume_file else 0
        ended = self.observer.follow(process.log_path, self.control.progress_meaning, resumed_step=resumed_step)
        if ended is not None:   # its start-up failure, for a watcher restarted before the next one counts the row
            self.journal.append("launch_ended", log=ended[0], start_error=ended[1])
        self.dead_observations = 0
        self.transition(RunPhase.RUNNING, f"launch {self.control.launches} (pid {process.pid})"
                         + (f" resuming from {resume_file}" if resume_file else " from scratch"))
        self.events(Launch(self.control.launches, process.pid, str(resume_file) if resume_file else None,
                           dict(self.control.env_in_force())))

    def save_interval_advice(self) -> str | None:
        return run_save_interval_advice(self.observer.tracker, self.history, self.journal, self.loaded.config)

    def attempt(self, playbook: Playbook) -> int:
        return attempt_number(self.history, playbook, time.time())

    # --- the session's phase: assigned here only (start-up and the dry run call these) ------------
    def continue_from(self, past: JournalReplay, acting: bool = True) -> None:
        """What the journal says the run had: its attempts and launches; acting, also the environment its remedies
        set and its divergences (a dry run launches nothing, so it needs neither)."""
        self.history = past.history
        self.observer.recall_launches(past.start_errors)
        self.control.continue_from(past.launches, past.extra_env if acting else None,
                                   past.diagnostic_env if acting else None)
        if acting:
            self.observer.tracker.divergences[:] = past.divergences   # the list rollback actions append to

    def reread_history(self) -> None:
        self.history = self.journal.replay().history

    def settle(self, phase: RunPhase, reason: str) -> None:
        """A phase the journal already holds (a completed run) or a dry run's read-only watch: nothing journaled,
        and the listeners told (the metrics endpoint's phase is the bus's)."""
        previous, self.phase = self.phase, phase
        self.events(Transition(previous, phase, reason))

    # --- helpers -------------------------------------------------------------------------------
    def transition(self, to: RunPhase, reason: str) -> None:
        previous, self.phase = self.phase, to
        if not self.dry_run:
            self.journal.append("transition", **{"from": previous.value, "to": to.value, "reason": reason})
        self.events(Transition(previous, to, str(reason)))

    def request_stop(self, why: str) -> None:
        """From a signal handler or a scheduler's thread: the watch loop acts on it between observations."""
        self.stop_requested = why

    def install_signal_handlers(self) -> None:
        def request_stop(signum: int, _frame: FrameType | None) -> None:
            self.stop_requested = f"watcher received {signal.Signals(signum).name}"

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, request_stop)

    def _stop_watching(self, why: str) -> None:
        detail = stop_on_request(why, self.control, self.journal, self.catalog, self.slurm)   # engine/watch/stopping.py
        self.transition(RunPhase.STOPPED, f"{why}; {detail}")
