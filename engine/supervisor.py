"""The watch loop: observe, match, plan, apply, record. One Supervisor per run folder.

Reads top to bottom: `run()` starts or re-attaches the trainer, then `tick()` repeats until the
run reaches a terminal state. Matching and planning are pure (matcher.py, planner.py); everything
that touches processes or files for a recovery goes through EngineRuntime.
"""

from __future__ import annotations

import signal
import statistics
import threading
import time
from pathlib import Path

from engine import checkpoints as ckpts
from engine import partial_saves
from engine.dry_run import observe_without_acting
from engine.incident_flow import IncidentHandling
from engine.incidents import IncidentStore
from engine.journal import Journal
from engine.lock import RunLock
from engine.matcher import MatchMemory, decide
from engine.observer import Observer
from engine.runtime import EngineRuntime
from engine.state import TERMINAL_STATES, CheckpointStatus, RunState, TrainerStatus
from engine.trainer_process import TrainerProcess, signal_name
from engine.trainers import adapter_for
from engine.config import LoadedConfig

DEAD_TRAINER_GRACE_OBSERVATIONS = 5   # a dead trainer nobody's playbook claims is escalated after this


class Supervisor(IncidentHandling):
    def __init__(self, loaded: LoadedConfig, playbooks, notifier, data_hash: str, dry_run: bool = False, events=None):
        self.loaded = loaded
        self.playbooks = playbooks
        self.notifier = notifier
        self.data_hash = data_hash
        self.dry_run = dry_run
        self.events = events or (lambda kind, **data: None)   # the CLI's live view listens here
        self.adapter = adapter_for(loaded.config.trainer.kind)
        run_dir = loaded.run_dir
        self.journal = Journal(run_dir / "journal.jsonl")
        self.lock = RunLock(run_dir)
        self.incidents = IncidentStore(run_dir, loaded.project_dir / ".runbook" / "incident-counter")
        self.observer = Observer(self.adapter, loaded.out_dir, self._tokens_per_iter())
        self.trainer: TrainerProcess | None = None
        self.state = RunState.STARTING
        self.memory = MatchMemory()
        self.history = None
        self.verified: set[int] = set()
        self.corrupt: dict[int, str] = {}
        self.extra_env: dict[str, str] = {}
        self.launch_count = 0
        self.dead_observations = 0
        self.stop_requested: str | None = None
        self.escalation: str | None = None
        self.last_snapshot = None
        self._exit_journaled: int | None = None
        self.past_exit: tuple[int | None, str | None] = (None, None)   # what an earlier watcher saw (dry-run)
        self.awaiting_progress: dict | None = None   # a recovered incident waiting for the first new progress
        self._size_cache: dict[Path, int] = {}
        self.recovery_lock = threading.Lock()   # upkeep jobs skip while the watch loop holds it
        self.upkeep = None

    # --- the loop ------------------------------------------------------------------------------
    def run(self) -> RunState:
        if self.dry_run:
            return observe_without_acting(self)
        self.lock.acquire()
        try:
            self._install_signal_handlers()
            with self.recovery_lock:
                self._start_or_continue()
            self._start_upkeep()
            while self.state not in TERMINAL_STATES:
                if self.stop_requested:
                    self._stop_watching(self.stop_requested)
                    break
                with self.recovery_lock:
                    self.tick()
                time.sleep(self.loaded.config.watch.poll_interval_s)
            return self.state
        finally:
            self._flush_awaiting("the watcher ended before the trainer made progress")
            if self.upkeep is not None:
                self.upkeep.shutdown()
            self.notifier.close()
            self.lock.release()

    def observe(self):
        """One observation: new log lines, checkpoint verification, disk, the process -> a snapshot."""
        now = time.time()
        new_lines = self.observer.read_lines(now)
        self.refresh_verification(quarantine_corrupt=False)
        snapshot = self.observer.snapshot(now, self.state, self._trainer_status(), self._checkpoint_status(), new_lines,
                                          self.loaded.config.watch)
        self.last_snapshot = snapshot
        self.events("observation", snapshot=snapshot, lines=new_lines)
        return snapshot

    def tick(self) -> None:
        snapshot = self.observe()
        self._check_recovery_progress()
        trainer = snapshot.trainer
        if not trainer.alive and trainer.pid is not None and trainer.pid != self._exit_journaled:
            self._exit_journaled = trainer.pid
            self.journal.append("trainer_exited", pid=trainer.pid, exit_code=trainer.exit_code, signal=trainer.signal)
        # exit_code is None only when nobody could record it (the launcher died too, or an old run folder).
        if not trainer.alive and trainer.exit_code in (0, None) and self._final_exists():
            self.refresh_verification(force=True)  # seal the checkpoints saved in the last moments
            self._apply_retention()
            self._transition(RunState.COMPLETED, reason="trainer exited 0 and final/ exists")
            return
        outcome = decide(snapshot, self.loaded.config, self.playbooks, self.memory, self.history)
        self.memory = outcome.memory
        for error in outcome.errors:
            self.events("expression_error", error=error)
        decision = outcome.decision
        if decision is not None and decision.kind in ("recover", "escalate"):
            self.dead_observations = 0
            self.handle_incident(decision, snapshot)
        elif not trainer.alive and decision is None:
            self.dead_observations += 1
            if self.dead_observations >= DEAD_TRAINER_GRACE_OBSERVATIONS:
                self._escalate_unclaimed(snapshot)

    def _start_upkeep(self) -> None:
        if self.dry_run or self.state in TERMINAL_STATES:
            return
        from engine.upkeep import SupervisorContext, Upkeep

        self.upkeep = Upkeep(self.loaded.config.upkeep, SupervisorContext(self), recovery_lock=self.recovery_lock,
                             events=self.events)
        self.upkeep.start()

    # --- start-up and re-attach ----------------------------------------------------------------
    def _start_or_continue(self) -> None:
        past = self.journal.replay()
        self.history = past.history
        self.extra_env = dict(past.extra_env)
        self.launch_count = past.launches
        self.refresh_verification(quarantine_corrupt=True, force=True)
        if past.run_state == RunState.COMPLETED:
            self.state = RunState.COMPLETED
            return
        if past.trainer_pid and past.run_state in (RunState.RUNNING, RunState.STARTING):
            trainer = TrainerProcess.attach(past.trainer_pid, Path(past.trainer_log), past.trainer_started,
                                            self._exit_status_path(past.launches))
            if trainer.alive:
                self.trainer = trainer
                self.observer.follow(trainer.log_path, self._tokens_per_iter(), replay_existing=True)
                self._transition(RunState.RUNNING, reason=f"re-attached to trainer pid {trainer.pid}")
                return
            if past.open_incident is None:
                # It ended while no watcher was running: the next tick judges that exit (its launcher
                # recorded it) with the launch's log, as if it had been watched.
                self.trainer = trainer
                self.observer.follow(trainer.log_path, self._tokens_per_iter(), replay_existing=True)
                code = trainer.poll()
                how = f"with exit code {code}" if trainer.exit_known else "with an exit status nobody recorded"
                self._transition(RunState.RUNNING, reason=f"trainer pid {trainer.pid} ended {how} while no watcher was running")
                return
        if past.open_incident is not None:
            self._continue_incident(past.open_incident, past.done_actions)
            return
        newest = ckpts.newest_verified(ckpts.list_checkpoints(self.loaded.out_dir), self.verified)
        runtime = EngineRuntime(self, {"id": "startup", "snapshot_model": None})
        if newest is not None:
            resume_file, _ = runtime._resume_file(newest)
            self.launch(resume_file)
        else:
            self.launch(None)

    # --- effects lent to actions ---------------------------------------------------------------
    def launch(self, resume_file: Path | None) -> None:
        self.launch_count += 1
        launch_dir = self.loaded.run_dir / "launches" / f"launch-{self.launch_count:03d}"
        launch_dir.mkdir(parents=True, exist_ok=True)
        self.loaded.save_copy(launch_dir / "run_config.yaml")  # the hyperparameters of this launch
        partial_saves.clear_trainer_tmp(self.loaded.out_dir)  # the trainer's TMPDIR: only its temporaries
        spec = self.adapter.prepare_launch(self.loaded, launch_dir, resume_file, self.data_hash)
        spec.env.update(self.extra_env)
        log_path = self.loaded.run_dir / "logs" / f"trainer-{self.launch_count:03d}.log"
        self.trainer = TrainerProcess.launch(spec, log_path, self._exit_status_path(self.launch_count))
        self.observer.follow(log_path, self._tokens_per_iter())
        self.dead_observations = 0
        (self.loaded.run_dir / "trainer.pid").write_text(f"{self.trainer.pid}\n")
        self.journal.append("launch", launch=self.launch_count, pid=self.trainer.pid, log=str(log_path),
                            exit_status=str(self.trainer.status_path),
                            started=self.trainer.started_at,
                            resume_from=str(resume_file) if resume_file else None, argv=spec.argv)
        self._transition(RunState.RUNNING, reason=f"launch {self.launch_count} (pid {self.trainer.pid})"
                         + (f" resuming from {resume_file}" if resume_file else " from scratch"))
        self.events("launch", pid=self.trainer.pid, resume_from=resume_file, launch=self.launch_count)

    def stop_trainer(self, reason: str) -> str:
        if self.trainer is None:
            return "no trainer"
        text = self.trainer.stop(self.loaded.config.watch.grace_period_s)
        self.journal.append("trainer_stopped", pid=self.trainer.pid, reason=reason, detail=text)
        return text

    def write_config(self, updates: dict) -> None:
        self.loaded = self.loaded.write_back(updates)
        self.journal.append("config_changed", updates=updates)

    def set_env(self, variables: dict) -> None:
        self.extra_env.update(variables)
        self.journal.append("env", vars=variables)

    def quarantine(self, ckpt, reason: str) -> Path:
        dest = ckpts.quarantine(ckpt, self.loaded.quarantine_dir, reason)
        self.verified.discard(ckpt.step)
        self.corrupt.pop(ckpt.step, None)
        self.journal.append("quarantined", step=ckpt.step, to=str(dest), reason=reason)
        self._relink_last()
        return dest

    def refresh_verification(self, quarantine_corrupt: bool = False, force: bool = False) -> list[str]:
        """Seal each checkpoint once its save is over; return the corrupt ones (quarantined if asked)."""
        out_dir = self.loaded.out_dir
        trainer_alive = self.trainer is not None and self.trainer.alive
        current_step = self.observer.tracker.step or 0
        newly_verified = False
        bad = []
        read: dict[str, list[int]] = {"sealed": [], "rechecked": []}
        started = time.monotonic()
        for c in ckpts.list_checkpoints(out_dir):
            if c.step in self.verified and not force:
                continue
            # A save is over when the trainer moved past that step or is gone.
            if trainer_alive and c.step >= current_step and not force:
                continue
            if c.step in self.corrupt and not force:
                bad.append(c.path.name)
                continue
            # A sealed checkpoint is checked against its manifest, not re-sealed: rewriting it would
            # cost a write per file and could seal over damage the manifest is there to catch.
            recheck = self.dry_run or ckpts.has_manifest(c)
            result = ckpts.verify_checkpoint(c) if recheck else ckpts.seal_checkpoint(c)
            read["rechecked" if recheck else "sealed"].append(c.step)
            if result.ok:
                self.verified.add(c.step)
                self.corrupt.pop(c.step, None)
                newly_verified = True
            else:
                self.corrupt[c.step] = result.reason or "failed verification"
                self.verified.discard(c.step)
                bad.append(c.path.name)
        if not self.dry_run and (read["sealed"] or read["rechecked"]):
            self.journal.append("verified", forced=force, bad=bad, seconds=round(time.monotonic() - started, 3), **read)
        if quarantine_corrupt:
            for c in ckpts.list_checkpoints(out_dir):
                if c.step in self.corrupt:
                    self.quarantine(c, f"failed verification: {self.corrupt[c.step]}")
        if newly_verified and not self.dry_run:
            self._relink_last()
        return bad

    def _relink_last(self) -> None:
        newest = ckpts.newest_verified(ckpts.list_checkpoints(self.loaded.out_dir), self.verified)
        link = self.loaded.out_dir / ckpts.LAST_LINK_NAME
        if newest is not None:
            ckpts.update_last_link(self.loaded.out_dir, newest)
        elif link.is_symlink():
            link.unlink()

    # --- helpers -------------------------------------------------------------------------------
    def _trainer_status(self) -> TrainerStatus:
        t = self.trainer
        if t is None:
            code, sig = self.past_exit
            return TrainerStatus(launches=self.launch_count, exit_code=code, signal=sig)
        alive = t.alive
        code = None if alive else t.poll()
        return TrainerStatus(
            pid=t.pid, alive=alive, exit_code=code, signal=signal_name(code), launches=self.launch_count,
            seconds_running=time.time() - t.started_at, stopped=alive and t.stopped,
        )

    def _checkpoint_status(self) -> CheckpointStatus:
        existing = ckpts.list_checkpoints(self.loaded.out_dir)
        newest = ckpts.newest_verified(existing, self.verified)
        return CheckpointStatus(
            count=len(existing),
            newest_step=existing[-1].step if existing else None,
            newest_verified_step=newest.step if newest else None,
            last_size_bytes=self._checkpoint_size(newest),
            corrupt_steps=sorted(self.corrupt),
        )

    def _checkpoint_size(self, ckpt) -> int:
        if ckpt is None:
            return 0
        if ckpt.path not in self._size_cache:
            self._size_cache[ckpt.path] = ckpt.size_bytes()
        return self._size_cache[ckpt.path]

    def save_interval_advice(self) -> str | None:
        from engine.advice import save_interval_advice

        tracker = self.observer.tracker
        save_cost = statistics.median(tracker.save_seconds) if tracker.save_seconds else None
        step_time = statistics.median(tracker.step_seconds) if tracker.step_seconds else None
        failures = self.history.all_fired()
        entries = self.journal.entries() if self.journal.path.exists() else []
        started = entries[0].get("time") if entries else None   # every line may be unreadable
        mtbf = (time.time() - started) / max(1, len(failures)) if started else None
        return save_interval_advice(save_cost, mtbf, step_time, self.loaded.config.save_interval)

    def _apply_retention(self) -> None:
        """keep_last_k + best, the run config's retention policy, once the run is over."""
        try:
            summary = EngineRuntime(self, {"id": "retention", "snapshot_model": None}).prune(None, True, False)
            self.journal.append("retention", summary=summary)
        except ValueError as error:  # a refusal to delete is reported, never forced
            self.events("warning", text=f"retention skipped: {error}")

    def _attempt(self, playbook) -> int:
        """1 for the first firing within the playbook's limits window, 2 for the next..."""
        now = time.time()
        earlier = [t for t in self.history.fired.get(playbook.name, ()) if now - t < playbook.limits.window]
        return len(earlier) + 1

    def _exit_status_path(self, launch: int) -> Path:
        """Where that launch's launcher records how the trainer ended (engine/launcher.py)."""
        return self.loaded.run_dir / "launches" / f"launch-{launch:03d}" / "exit-status.json"

    def _final_exists(self) -> bool:
        return (self.loaded.out_dir / "final" / "lit_model.pth").is_file()

    def _tokens_per_iter(self) -> int:
        return self.loaded.config.micro_batch_size * self.loaded.config.model.block_size

    def _transition(self, to: RunState, reason: str, journal: bool = True) -> None:
        previous, self.state = self.state, to
        if journal and not self.dry_run:
            self.journal.append("transition", **{"from": previous.value, "to": to.value, "reason": reason})
        self.events("transition", previous=previous, state=to, reason=reason)

    def _install_signal_handlers(self) -> None:
        def request_stop(signum, _frame):
            self.stop_requested = signal.Signals(signum).name

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, request_stop)

    def _stop_watching(self, signame: str) -> None:
        detail = "no trainer running"
        if self.trainer is not None and self.trainer.alive:
            detail = self.stop_trainer(f"watcher received {signame}")
        self._transition(RunState.STOPPED, reason=f"watcher received {signame}; {detail}")
