"""The watch loop: observe, match, plan, apply, record. One Supervisor per run folder.

Reads top to bottom: `run()` starts or re-attaches the trainer, then `tick()` repeats until the
run reaches a terminal state. Matching and planning are pure (matcher.py, planner.py); everything
that touches processes or files for a recovery goes through EngineRuntime.
"""

from __future__ import annotations

import datetime as dt
import shutil
import statistics
import signal
import threading
import time
import traceback
from pathlib import Path

from engine import checkpoints as ckpts
from engine.incidents import IncidentStore
from engine.journal import Journal
from engine.lock import RunLock
from engine.matcher import MatchMemory, decide
from engine.observer import Observer
from engine.planner import plan
from engine.runtime import EngineRuntime
from engine.state import TERMINAL_STATES, CheckpointStatus, RunState, TrainerStatus
from engine.trainer_process import TrainerProcess, signal_name
from engine.trainers import adapter_for
from runbook.config import LoadedConfig
from runbook.yaml_source import atomic_write_text

DEAD_TRAINER_GRACE_OBSERVATIONS = 5   # a dead trainer nobody's playbook claims is escalated after this


class Supervisor:
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
        self.recovery_lock = threading.Lock()   # upkeep jobs skip while the watch loop holds it
        self.upkeep = None

    # --- the loop ------------------------------------------------------------------------------
    def run(self) -> RunState:
        if self.dry_run:
            return self._dry_run()
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
        # exit_code is None when the trainer was re-attached after a watcher restart (not our child).
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

    def _dry_run(self) -> RunState:
        """Observe without acting: attach to a live trainer (read-only, no lock) and print what each
        recovery would do, or judge the state the run is in now. Nothing is signalled or written."""
        past = self.journal.replay()
        self.history = past.history
        self.launch_count = past.launches
        attached = (TrainerProcess.attach(past.trainer_pid, Path(past.trainer_log), past.trainer_started)
                    if past.trainer_pid else None)
        if past.trainer_log:
            self.observer.follow(Path(past.trainer_log), self._tokens_per_iter(), replay_existing=True)
        if attached is None:
            self.past_exit = (past.last_exit_code, past.last_exit_signal)
            self.events("dry_run", text="no live trainer: judging the run folder as it is now")
            snapshot = self.observe()
            outcome = decide(snapshot, self.loaded.config, self.playbooks, MatchMemory(), self.history)
            if outcome.decision is None:
                self.events("dry_run", text="no playbook matches the current state")
            else:
                self.events("dry_run_plan", decision=outcome.decision,
                            steps=plan(outcome.decision.playbook, snapshot, self.loaded.config, self._attempt(outcome.decision.playbook)))
            return RunState.STOPPED
        self.trainer = attached
        self.state = RunState.RUNNING
        self.events("dry_run", text=f"watching trainer pid {attached.pid} without acting")
        self._install_signal_handlers()
        while attached.alive and not self.stop_requested:
            snapshot = self.observe()
            outcome = decide(snapshot, self.loaded.config, self.playbooks, self.memory, self.history)
            self.memory = outcome.memory
            if outcome.decision is not None and outcome.decision.kind != "wait":
                self.events("dry_run_plan", decision=outcome.decision,
                            steps=plan(outcome.decision.playbook, snapshot, self.loaded.config, self._attempt(outcome.decision.playbook)))
            time.sleep(self.loaded.config.watch.poll_interval_s)
        return RunState.STOPPED

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
            attached = TrainerProcess.attach(past.trainer_pid, Path(past.trainer_log), past.trainer_started)
            if attached is not None:
                self.trainer = attached
                self.observer.follow(attached.log_path, self._tokens_per_iter(), replay_existing=True)
                self._transition(RunState.RUNNING, reason=f"re-attached to trainer pid {attached.pid}")
                return
        if past.open_incident is not None:
            self._continue_incident(past.open_incident, past.done_actions)
            return
        if past.trainer_pid and self._final_exists() and past.run_state == RunState.RUNNING:
            self._transition(RunState.COMPLETED, reason="trainer finished while no watcher was running")
            return
        newest = ckpts.newest_verified(ckpts.list_checkpoints(self.loaded.out_dir), self.verified)
        runtime = EngineRuntime(self, {"id": "startup", "snapshot_model": None})
        if newest is not None:
            resume_file, _ = runtime._resume_file(newest)
            self.launch(resume_file)
        else:
            self.launch(None)

    def _continue_incident(self, opened: dict, done: list[int]) -> None:
        """A watcher died mid-recovery: finish the same incident instead of opening a second one."""
        from engine.state import StateSnapshot

        playbook = next((p for p in self.playbooks if p.name == opened["playbook"]), None)
        snapshot = StateSnapshot.model_validate(opened["snapshot"])
        record = self.incidents.load(opened["incident"])
        record["snapshot_model"] = snapshot
        record.setdefault("notes", []).append("the watcher restarted during this recovery and continued it")
        if playbook is None:
            self.escalation = f"playbook '{opened['playbook']}' of the open {opened['incident']} no longer exists"
            self._close_incident(record, EngineRuntime(self, record), "escalated")
            return
        self._apply(record, playbook, snapshot, skip=set(done))

    # --- incidents -----------------------------------------------------------------------------
    def handle_incident(self, decision, snapshot) -> None:
        playbook = decision.playbook
        steps = plan(playbook, snapshot, self.loaded.config, self._attempt(playbook))
        self._flush_awaiting("the trainer failed again before making progress")
        incident_id = self.incidents.next_id()
        record = {
            "id": incident_id,
            "playbook": playbook.name,
            "playbook_hash": playbook.content_hash,
            "playbook_source": playbook.source,
            "severity": playbook.severity,
            "symptom": playbook.description,
            "lesson": playbook.lesson,
            "decision": decision.kind,
            "attempt": self._attempt(playbook),
            "decision_reason": decision.reason,
            "matched": list(decision.matched),
            "inhibited": list(decision.inhibited),
            "detected_at": snapshot.time,
            "opened_at": time.time(),
            "opened_at_iso": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "step_at_failure": snapshot.metrics.step,
            "tokens_at_failure": snapshot.metrics.tokens,
            "trainer_exit_code": snapshot.trainer.exit_code,
            "log_excerpt": snapshot.tail[-40:],
            "snapshot": snapshot.model_dump(mode="json"),
            "plan": [s.to_dict() for s in steps],
            "config_before": self.loaded.config.model_dump(mode="json"),
            "actions": [],
            "outcome": "open",
        }
        self._save_record(record)
        self.journal.append("incident_opened", incident=incident_id, playbook=playbook.name, decision=decision.kind,
                            snapshot=record["snapshot"])
        self.history = self.journal.replay().history  # limits count this firing from now on
        self._transition(RunState.INCIDENT, reason=f"{incident_id}: {decision.reason}")
        self.notifier.incident_opened(incident_id, f"{playbook.name} ({playbook.severity})", playbook.description,
                                      {"step": str(snapshot.metrics.step), "decision": decision.reason})
        self.events("incident_opened", record=record)
        record["snapshot_model"] = snapshot
        if decision.kind == "escalate":
            self.escalation = decision.reason
            self._close_incident(record, EngineRuntime(self, record), "escalated")
            return
        self._apply(record, playbook, snapshot)

    def _apply(self, record: dict, playbook, snapshot, skip: set[int] = frozenset()) -> None:
        self._transition(RunState.RECOVERING, reason=record["id"])
        runtime = EngineRuntime(self, record)
        steps = plan(playbook, snapshot, self.loaded.config, record.get("attempt", 1))
        aborted = None
        for step in steps:
            if step.index in skip:
                continue
            result = self._run_step(step, runtime)
            record["actions"].append(result)
            self.journal.append("action_done", incident=record["id"], index=step.index, ok=result["ok"])
            self._save_record(record)
            self.notifier.incident_update(record["id"], f"{step.verb}: {result['summary']}")
            self.events("action", record=record, result=result)
            if runtime.escalated_reason:
                break
            if not result["ok"] and step.on_failure != "continue":
                aborted = step.on_failure
                if aborted == "escalate":
                    runtime.escalate(f"{step.verb} failed: {result['summary']}")
                break
        if runtime.escalated_reason:
            self.escalation = runtime.escalated_reason
            outcome = "escalated"
        elif aborted or not (runtime.resumed or (self.trainer and self.trainer.alive)):
            outcome = "failed" if aborted else "recovered"
            if aborted:
                self.escalation = f"{record['id']}: recovery aborted at a failed action"
        else:
            outcome = "recovered"
        self._close_incident(record, runtime, outcome)

    def _run_step(self, step, runtime) -> dict:
        from engine.actions import REGISTRY
        from engine.actions.base import ActionFailed

        started = time.time()
        base = {"index": step.index, "verb": step.verb, "description": step.description}
        if step.skipped:
            return {**base, "ok": True, "skipped": True, "summary": f"skipped ({step.skipped})", "seconds": 0.0}
        if step.error:
            return {**base, "ok": False, "summary": f"could not plan: {step.error}", "seconds": 0.0}
        try:
            result = REGISTRY[step.verb].apply(step.params, runtime)
            ok, summary = result.ok, result.summary
        except ActionFailed as err:
            ok, summary = False, str(err)
        except Exception as err:  # noqa: BLE001 - a failing action is recorded, never crashes the watcher
            ok, summary = False, f"{type(err).__name__}: {err}"
            self.events("action_traceback", text=traceback.format_exc())
        return {**base, "ok": ok, "summary": summary, "seconds": round(time.time() - started, 3)}

    def _close_incident(self, record: dict, runtime, outcome: str) -> None:
        record["outcome"] = outcome
        for key, default in (("config_changes", {}), ("resumed_from", None), ("resumed_step", None), ("notes", [])):
            record.setdefault(key, default)
        record["closed_at"] = time.time()
        # runbook's own share: detection -> the trainer relaunched (or the decision to stop)
        record["runbook_seconds"] = round(record["closed_at"] - record["detected_at"], 3)
        record["recovery_seconds"] = record["runbook_seconds"]
        record["config_after"] = self.loaded.config.model_dump(mode="json")
        if self.escalation and outcome != "recovered":
            record["escalation_reason"] = self.escalation
        failed_step = record.get("step_at_failure")
        resumed = record.get("resumed_step")
        if failed_step is not None and resumed is not None:
            record["steps_lost"] = max(0, failed_step - resumed)
            record["tokens_lost"] = record["steps_lost"] * self.loaded.config.batch_size * self.loaded.config.model.block_size
        else:
            record["steps_lost"] = record.get("steps_lost")
            record["tokens_lost"] = record.get("tokens_lost")
        self._save_record(record)
        self.journal.append("incident_closed", incident=record["id"], outcome=outcome)
        self.history = self.journal.replay().history
        if outcome == "recovered":
            self._transition(RunState.RUNNING, reason=f"{record['id']} recovered")
        else:
            self._transition(RunState.ESCALATED, reason=self.escalation or outcome)
        if outcome == "recovered" and runtime.resumed:
            # The recovery is over when the trainer makes progress again: report it then.
            self.awaiting_progress = record
        else:
            self._report_incident(record)

    def _save_record(self, record: dict) -> None:
        """Write the incident record atomically; on a full disk keep it in memory and try again after
        the next action (a disk-full recovery makes space first), never leaving half a file."""
        try:
            self.incidents.write(_persistable(record))
        except OSError as error:
            self.events("warning", text=f"could not write {record['id']} yet ({error.strerror}); will retry")

    def _report_incident(self, record: dict, note: str | None = None) -> None:
        """The run-log entry, the Slack close and the console line, once the outcome is known."""
        if note:
            record.setdefault("notes", []).append(note)
            self._save_record(record)
        self._append_run_log(record)
        self.notifier.incident_closed(record["id"], record["outcome"], _closing_summary(record),
                                      escalate=record["outcome"] != "recovered")
        self.events("incident_closed", record=record)

    def _check_recovery_progress(self) -> None:
        record = self.awaiting_progress
        if record is None:
            return
        tracker = self.observer.tracker
        if tracker.progress_since_launch > 0 and tracker.last_progress_time is not None:
            record["first_progress_at"] = tracker.last_progress_time
            record["recovery_seconds"] = round(tracker.last_progress_time - record["detected_at"], 3)
            record["trainer_restart_seconds"] = round(tracker.last_progress_time - record["closed_at"], 3)
            self._save_record(record)
            self.awaiting_progress = None
            self._report_incident(record)

    def _flush_awaiting(self, why: str) -> None:
        if self.awaiting_progress is not None:
            record, self.awaiting_progress = self.awaiting_progress, None
            self._report_incident(record, note=why)

    def _append_run_log(self, record: dict) -> None:
        from runbook.run_log import append_entry

        template = self.loaded.config.run_log_template
        try:
            append_entry(self.loaded.run_log, record, self.loaded.resolve(template) if template else None)
        except Exception as err:  # noqa: BLE001 - the record on disk is complete; say what went wrong
            self.events("warning", text=f"could not append to {self.loaded.run_log}: {err}")

    def _escalate_unclaimed(self, snapshot) -> None:
        from engine.matcher import Decision
        from engine.playbook import build_playbook

        code = snapshot.trainer.exit_code
        fallback = build_playbook({
            "name": "unclaimed-failure",
            "description": f"the trainer exited (code {code}) and no playbook matched",
            "severity": "critical",
            "lesson": "Write a playbook for this failure: `runbook replay` the incident after adding it.",
            "match": {"exit": {"nonzero": True}},
            "actions": [{"escalate": {"reason": "no playbook matched this failure"}}],
        })
        self.handle_incident(Decision("escalate", fallback, f"trainer exited with {code} and no playbook matched"), snapshot)

    # --- effects lent to actions ---------------------------------------------------------------
    def launch(self, resume_file: Path | None) -> None:
        self.launch_count += 1
        launch_dir = self.loaded.run_dir / "launches" / f"launch-{self.launch_count:03d}"
        launch_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.loaded.path, launch_dir / "run_config.yaml")  # the hyperparameters of this launch
        tmp = self.loaded.out_dir / ".tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        spec = self.adapter.prepare_launch(self.loaded, launch_dir, resume_file, self.data_hash)
        spec.env.update(self.extra_env)
        log_path = self.loaded.run_dir / "logs" / f"trainer-{self.launch_count:03d}.log"
        self.trainer = TrainerProcess.launch(spec, log_path)
        self.observer.follow(log_path, self._tokens_per_iter())
        self.dead_observations = 0
        (self.loaded.run_dir / "trainer.pid").write_text(f"{self.trainer.pid}\n")
        self.journal.append("launch", launch=self.launch_count, pid=self.trainer.pid, log=str(log_path),
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
        for c in ckpts.list_checkpoints(out_dir):
            if c.step in self.verified and not force:
                continue
            # A save is over when the trainer moved past that step or is gone.
            if trainer_alive and c.step >= current_step and not force:
                continue
            if c.step in self.corrupt and not force:
                bad.append(c.path.name)
                continue
            result = ckpts.verify_checkpoint(c) if self.dry_run else ckpts.seal_checkpoint(c)
            if result.ok:
                self.verified.add(c.step)
                self.corrupt.pop(c.step, None)
                newly_verified = True
            else:
                self.corrupt[c.step] = result.reason or "failed verification"
                self.verified.discard(c.step)
                bad.append(c.path.name)
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

    _size_cache: dict = {}

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
        started = self.journal.entries()[0]["time"] if self.journal.path.exists() else None
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


def _persistable(record: dict) -> dict:
    return {k: v for k, v in record.items() if k != "snapshot_model"}


def _closing_summary(record: dict) -> str:
    actions = "; ".join(f"{a['verb']}: {a['summary']}" for a in record["actions"]) or "no action"
    lost = record.get("steps_lost")
    return f"{record['outcome']}: {actions}" + (f" (lost {lost} steps)" if lost is not None else "")
