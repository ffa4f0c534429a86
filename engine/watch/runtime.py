"""The effects actions may have: the only place that signals the trainer or changes files for a recovery.

One EngineRuntime is lent to the actions of one incident. It names its collaborators (the trainer
control, the checkpoint ledger, the observation function, the notifier) and records what the
incident learns on the typed Incident; actions see only the members of actions/base.Runtime.
"""

from __future__ import annotations

import time

from engine.core.events import WatchWarning
from engine.language.actions.base import ActionFailed
from engine.core import data_windows
from engine.core.durable import gzip_replace
from engine.core.state import stall
from engine.records.incident import Incident
from engine.datascan.scan import DataScanError, scan_folder
from engine.expr.expressions import evaluate_condition
from engine.watch.context import WatchContext


class EngineRuntime:
    def __init__(self, incident: Incident, context: WatchContext):
        self.incident = incident
        self._ctx = context
        self.escalated_reason: str | None = None
        self.resumed = False
        self.bad_step: int | None = None   # the first bad step of this incident's rollback
        self.verified_all = False   # a full verification already ran in this incident

    @property
    def loaded(self):
        return self._ctx.control.loaded

    @property
    def state(self):
        return self.incident.state

    @property
    def trainer(self):
        """The trainer process (read-only use: diagnosis samples it)."""
        return self._ctx.control.process

    # --- the trainer ---------------------------------------------------------------------------
    def stop_trainer(self, reason: str) -> str:
        return self._ctx.control.stop(reason)

    def resume(self, source: str, step: int | None = None) -> str:
        control, ledger = self._ctx.control, self._ctx.ledger
        if control.alive:
            control.stop("restart for resume")
        # Verify everything again right before resuming (a file can rot after it was sealed), unless
        # verify_checkpoints just did: with 10 GB checkpoints a second full read costs minutes.
        ledger.refresh(quarantine_corrupt=True, force=not self.verified_all)
        if source == "step":
            chosen = next((c for c in ledger.checkpoints() if c.step == step and c.step in ledger.verified), None)
            if chosen is None:
                raise ActionFailed(f"no verified checkpoint at step {step}")
        else:
            chosen = ledger.newest_verified()
        resume_file, detail = None, "from scratch (no verified checkpoint)"
        if chosen is not None:
            plan = control.adapter.prepare_resume(chosen, self.loaded, self.loaded.folder.resume)
            resume_file, detail = plan.file, plan.detail
            if plan.note:
                self.note(plan.note)
            self.incident.resumed_from = str(ledger.layout.resume_file(chosen.path))
            self.incident.resumed_step = chosen.step
        else:
            self.incident.resumed_step = 0
        self._ctx.launch(resume_file)
        self.resumed = True
        return f"relaunched trainer {detail}"

    # --- checkpoints and disk ------------------------------------------------------------------
    def verify_all(self) -> str:
        bad = self._ctx.ledger.refresh(quarantine_corrupt=True, force=True)
        self.verified_all = True
        return f"quarantined {len(bad)} corrupt checkpoint(s): {', '.join(bad)}" if bad else "all checkpoints verified"

    def rollback(self, bad_step: int | None, steps: int, scan_nonfinite: bool) -> str:
        if self._ctx.control.alive:
            self._ctx.control.stop("rollback")
        if bad_step is None:
            bad_step = self.state.metrics.step or 0
        self.bad_step = bad_step   # a skip_data after it skips from the resume point to past this
        self._ctx.journal.append("divergence_rollback", incident=self.incident.id, bad_step=bad_step)
        self._ctx.divergences.append(bad_step)   # the next divergence's state.metrics.previous_bad_step
        suspect = self._distrust_resume_point(bad_step)
        result = self._ctx.ledger.rollback(bad_step, steps, scan_nonfinite, f"rollback ({self.incident.id})")
        target = result.target
        self.incident.rollback_target_step = target.step if target else 0
        where = f"step {target.step}" if target else "the start (no clean checkpoint left)"
        return (f"{suspect}; " if suspect else "") + f"{result.summary()}; next resume from {where}"   # what moved, and why

    def skip_data(self, margin: int) -> str:
        """The data window the divergence came from, skipped by every later launch: the positions of the steps from
        the rollback's resume point to `margin` past the first bad step (engine/core/data_windows.py)."""
        if self.bad_step is None:
            raise ActionFailed("skip_data needs a rollback before it in the same playbook (which steps diverged?)")
        config = self.loaded.config
        first, last = (self.incident.rollback_target_step or 0) + 1, self.bad_step + margin
        env = self._ctx.control.env_in_force()
        try:
            windows = data_windows.parse(env.get(data_windows.ENV))
        except ValueError:
            windows = []   # not runbook's value: replaced by a well-formed one
        merged, (a, b) = data_windows.skip_steps(windows, first, last)
        self._ctx.control.set_env({data_windows.ENV: data_windows.format_windows(merged)}, False, self.incident.id)
        batches, tokens = b - a + 1, (b - a + 1) * config.batch_size * config.model.block_size
        self._ctx.journal.append("data_skipped", incident=self.incident.id, steps=[first, last], positions=[a, b],
                                 batches=batches, tokens=tokens)
        text = (f"skipping the data of steps {first}-{last} (positions {a}-{b}: {batches} batches, {tokens:,} tokens) "
                f"in every later launch ({data_windows.ENV}={data_windows.format_windows(merged)}); the step counter "
                "and lr schedule are kept")
        self.note(text)
        return text

    def _distrust_resume_point(self, bad_step: int) -> str | None:
        """The checkpoint C this launch resumed from, when the divergence began within watch.suspect_within_steps
        (default: save_interval) after C: C may hold the poison (a rollback to it would diverge again), so it is
        marked suspect (moved to the quarantine, its manifest saying why) and the rollback's resume point is older (marin#5386: 8k steps lost to a poisoned fallback)."""
        ledger, config = self._ctx.ledger, self.loaded.config
        resumed_from = self._ctx.journal.replay().resumed_from
        step = ledger.layout.step_in_path(resumed_from) if resumed_from else None
        within = config.watch.suspect_within_steps or config.save_interval
        if step is None or not step < bad_step <= step + within:
            return None
        reason = (f"the divergence began at step {bad_step}, {bad_step - step} step(s) after resuming from it "
                  f"({self.incident.id}, within watch.suspect_within_steps {within})")
        moved = ledger.mark_suspect(step, reason)
        if moved is None:
            return None
        self.note(f"checkpoint {step} marked suspect: {reason}; moved to {moved}, later resumes choose an older one")
        return f"checkpoint {step} marked suspect (moved to the quarantine)"

    def prune(self, keep_last_k: int | None, keep_best: bool, remove_partial: bool) -> str:
        ledger = self._ctx.ledger
        ledger.refresh(saving_from_step=self._ctx.saving_from())
        result = ledger.prune(keep_last_k or self.loaded.config.keep_last_k,
                              self._ctx.best_val_step() if keep_best else None,
                              remove_partial, trainer_alive=self._ctx.control.alive)
        self.incident.freed_bytes += result.freed_bytes
        self.incident.deleted.extend(result.removed + result.deleted)
        if result.foreign:
            self.incident.left_alone = list(result.foreign)
            self.note(result.foreign_warning + f" (in {self.loaded.out_dir})")
            self._ctx.events(WatchWarning(result.foreign_warning))
        return result.summary()

    def compress_logs(self, min_bytes: int) -> str:
        """gzip the logs no trainer writes any more (atomically: this runs on a full disk)."""
        control = self._ctx.control
        current = control.process.log_path if control.process else None
        count, saved = 0, 0
        for log in sorted(self.loaded.folder.logs.glob("*.log")):
            if log == current or log.stat().st_size < min_bytes:
                continue
            saved += gzip_replace(log)
            count += 1
        return f"compressed {count} log(s), saved {saved / 1e6:.2f} MB"

    def scan_data(self, max_tokens_per_line: int) -> str:
        if self.loaded.config.data.kind == "data-module":
            raise DataScanError("this run reads its data through the trainer's own data module (data.kind: "
                                "data-module); runbook scans only folders of .txt files")
        # a trainer with its own tokenizer (kind script, hf-trainer) and no tokenizer.json: lengths in bytes
        report = scan_folder(self.loaded.data_path("train_dir"), self.loaded.data_path("tokenizer_dir"), max_tokens_per_line,
                             bytes_without_tokenizer=self.loaded.config.trainer.kind in ("script", "hf-trainer"))
        self.incident.data_scan = report
        return report["summary"]

    def record_diagnosis(self, report: dict) -> None:
        self.incident.diagnosis = report

    def save_interval_advice(self) -> str | None:
        return self._ctx.save_interval_advice()

    def wait_for(self, condition, timeout: float) -> tuple[bool, float]:
        """Keep observing (lines, metrics, checkpoints) until the condition holds or time runs out."""

        started = time.time()
        while True:
            snapshot = self._ctx.observe()
            held, _error = evaluate_condition(condition, {"state": snapshot, "config": self.loaded.config})
            waited = time.time() - started
            # Stop waiting when something else needs the watcher: the trainer died or stopped progressing.
            stuck = stall(snapshot)
            stalled = stuck is not None and stuck[1] >= stuck[2]   # start-up is judged by its signs of life
            if held or waited >= timeout or not snapshot.trainer.alive or stalled:
                return held, waited
            time.sleep(self.loaded.config.watch.poll_interval_s)

    # --- configuration and people --------------------------------------------------------------
    def update_config(self, updates: dict) -> str:
        before = {k: getattr(self.loaded.config, k) for k in updates}
        self._ctx.control.write_config(updates)
        self.incident.config_changes.update({k: [before[k], v] for k, v in updates.items()})
        return "run config: " + ", ".join(f"{k} {before[k]} -> {v}" for k, v in updates.items())

    def set_env(self, variables: dict, diagnostic: bool = False) -> str:
        before = self._ctx.control.env_in_force()
        notes = self._ctx.control.set_env(variables, diagnostic, self.incident.id)
        after = self._ctx.control.env_in_force()
        for name in variables:   # what the next launch gets differently, so it can be undone (remedy_guard.py)
            first = self.incident.env_changes.get(name, [before.get(name)])[0]
            self.incident.env_changes[name] = [first, after.get(name)]
        metrics = self.state.metrics
        self._ctx.control.note_env_change(self.incident.id, list(self.incident.env_changes),
                                          metrics.tokens_per_sec or metrics.baseline_tokens_per_sec)
        text = "environment for later launches: " + ", ".join(f"{k}={v}" for k, v in variables.items())
        text += " (diagnostic: lifted once the next launch trains healthily)" if diagnostic else ""
        return text + "".join(f"; {note}" for note in notes)

    def notify(self, text: str) -> None:
        self._ctx.notifier.incident_update(self.incident.id, text)

    def note(self, text: str) -> None:
        self.incident.note(text)

    def escalate(self, reason: str) -> None:
        self.escalated_reason = reason


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
