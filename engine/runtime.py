"""The effects actions may have: the only place that signals the trainer or changes files for a recovery."""

from __future__ import annotations

import gzip
import shutil
import time
from pathlib import Path

from ruamel.yaml import YAML

from engine import checkpoints as ckpts
from engine import partial_saves
from engine.actions.base import ActionFailed


class EngineRuntime:
    """Lent to actions during one incident. Holds the supervisor, and what the incident learns."""

    def __init__(self, supervisor, incident: dict):
        self.sup = supervisor
        self.incident = incident
        self.escalated_reason: str | None = None
        self.resumed = False
        self.verified_all = False   # a full verification already ran in this incident

    @property
    def loaded(self):
        return self.sup.loaded

    @property
    def state(self):
        return self.incident["snapshot_model"]

    # --- the trainer ---------------------------------------------------------------------------
    def stop_trainer(self, reason: str) -> str:
        return self.sup.stop_trainer(reason)

    def resume(self, source: str, step: int | None = None) -> str:
        sup = self.sup
        if sup.trainer is not None and sup.trainer.alive:
            sup.stop_trainer("restart for resume")
        # Verify everything again right before resuming (a file can rot after it was sealed), unless
        # verify_checkpoints just did: with 10 GB checkpoints a second full read costs minutes.
        sup.refresh_verification(quarantine_corrupt=True, force=not self.verified_all)
        candidates = ckpts.list_checkpoints(sup.loaded.out_dir)
        if source == "step":
            chosen = next((c for c in candidates if c.step == step and c.step in sup.verified), None)
            if chosen is None:
                raise ActionFailed(f"no verified checkpoint at step {step}")
        else:
            chosen = ckpts.newest_verified(candidates, sup.verified)
        resume_file = None
        detail = "from scratch (no verified checkpoint)"
        if chosen is not None:
            resume_file, detail = self._resume_file(chosen)
            self.incident["resumed_from"] = str(chosen.pth)
            self.incident["resumed_step"] = chosen.step
        else:
            self.incident["resumed_step"] = 0
        sup.launch(resume_file)
        self.resumed = True
        return f"relaunched trainer {detail}"

    def _resume_file(self, chosen) -> tuple[Path, str]:
        """The checkpoint file to hand the trainer; a rescaled copy when micro_batch_size changed."""
        saved_mb = checkpoint_micro_batch(chosen.path)
        new_mb = self.loaded.config.micro_batch_size
        if saved_mb is None or saved_mb == new_mb:
            return chosen.pth, f"from step {chosen.step}"
        copy = self.loaded.run_dir / "resume" / f"step-{chosen.step:08d}-mb{new_mb}.pth"
        # litgpt counts iter_num in micro-batches: rescale so tokens and the lr schedule stay exact.
        info = ckpts.rescaled_copy(chosen.pth, copy, saved_mb / new_mb)
        self.incident.setdefault("notes", []).append(
            f"resumed from a copy of step {chosen.step} with iter_num {info['iter_num_before']} -> {info['iter_num_after']} "
            f"(micro_batch_size {saved_mb} -> {new_mb}); the original checkpoint is untouched"
        )
        return copy, f"from step {chosen.step} (iter_num rescaled for micro_batch_size {saved_mb} -> {new_mb})"

    # --- checkpoints and disk ------------------------------------------------------------------
    def verify_all(self) -> str:
        bad = self.sup.refresh_verification(quarantine_corrupt=True, force=True)
        self.verified_all = True
        return f"quarantined {len(bad)} corrupt checkpoint(s): {', '.join(bad)}" if bad else "all checkpoints verified"

    def rollback(self, bad_step: int | None, steps: int, scan_nonfinite: bool) -> str:
        sup = self.sup
        if sup.trainer is not None and sup.trainer.alive:
            sup.stop_trainer("rollback")
        if bad_step is None:
            bad_step = self.state.metrics.step or 0
        limit = bad_step - steps
        moved = []
        for c in ckpts.list_checkpoints(sup.loaded.out_dir):
            reason = None
            if c.step >= bad_step or c.step > limit:
                reason = f"saved at step {c.step}, within {steps} steps of or after the first bad step {bad_step}"
            elif scan_nonfinite and c.pth.is_file():
                try:
                    nonfinite = ckpts.find_nonfinite_tensors(c.pth, limit=3)
                except Exception as err:  # noqa: BLE001 - unreadable counts as untrustworthy
                    nonfinite = [f"unreadable ({type(err).__name__})"]
                if nonfinite:
                    reason = f"non-finite weights in {', '.join(nonfinite)}"
            if reason:
                moved.append(sup.quarantine(c, f"rollback ({self.incident['id']}): {reason}"))
        target = ckpts.newest_verified(ckpts.list_checkpoints(sup.loaded.out_dir), sup.verified)
        self.incident["rollback_target_step"] = target.step if target else 0
        where = f"step {target.step}" if target else "the start (no clean checkpoint left)"
        return f"quarantined {len(moved)} checkpoint(s) at/after step {limit}; next resume from {where}"

    def prune(self, keep_last_k: int | None, keep_best: bool, remove_partial: bool) -> str:
        sup = self.sup
        out_dir = sup.loaded.out_dir
        # Only what this run wrote may go: its trainer's announced saves and runbook's own temp names.
        announced = partial_saves.read_announced(sup.loaded.run_dir / "logs", out_dir)
        cleanup = partial_saves.find_partial_saves(out_dir, announced)
        freed, moved, removed = 0, [], []
        trainer_alive = sup.trainer is not None and sup.trainer.alive
        if remove_partial and not trainer_alive:  # a save in progress looks partial
            for name in cleanup.partial:
                freed += _size(out_dir / name)
                sup.quarantine(ckpts.Checkpoint(out_dir / name, int(name.split("-")[1])), "partial save")
                moved.append(name)
            freed += partial_saves.remove_temps(out_dir, cleanup.temps)
            removed = list(cleanup.temps)
        sup.refresh_verification()
        existing = ckpts.list_checkpoints(out_dir)
        newest = ckpts.newest_verified(existing, sup.verified)
        protected = {newest.step} if newest else set()
        protected |= {c.step for c in existing if c.step not in sup.verified}  # unverified: maybe being written
        best = sup.observer.tracker.best_val_step if keep_best else None
        owned = partial_saves.owned_checkpoints(out_dir, announced)
        doomed = ckpts.plan_prune(owned, keep_last_k or sup.loaded.config.keep_last_k, best, protected)
        freed += ckpts.apply_prune(out_dir, doomed, announced)
        for c in doomed:
            sup.verified.discard(c.step)
        self.incident.setdefault("freed_bytes", 0)
        self.incident["freed_bytes"] += freed
        self.incident.setdefault("deleted", []).extend(removed + [c.path.name for c in doomed])
        kept = [c.step for c in ckpts.list_checkpoints(out_dir)]
        parts = []
        if moved:
            parts.append(f"moved {len(moved)} partial save(s) to quarantine ({_names(moved)})")
        if removed:
            parts.append(f"deleted {len(removed)} temporary file(s) of runbook's ({_names(removed)})")
        parts.append(f"deleted {len(doomed)} checkpoint(s){f' ({_names([c.path.name for c in doomed])})' if doomed else ''}, "
                     f"freed {freed / 1e6:.1f} MB; kept steps {kept}")
        if cleanup.foreign:
            warning = (f"left alone {len(cleanup.foreign)} item(s) in {out_dir} that runbook did not write: "
                       f"{_names(cleanup.foreign)}")
            self.incident["left_alone"] = list(cleanup.foreign)
            self.note(warning)
            sup.events("warning", text=warning)
            parts.append(warning)
        return "; ".join(parts)

    def compress_logs(self, min_bytes: int) -> str:
        sup = self.sup
        current = sup.trainer.log_path if sup.trainer else None
        count, saved = 0, 0
        for log in sorted((sup.loaded.run_dir / "logs").glob("*.log")):
            if log == current or log.stat().st_size < min_bytes:
                continue
            target = log.with_suffix(".log.gz")
            with open(log, "rb") as src, gzip.open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            saved += log.stat().st_size - target.stat().st_size
            log.unlink()
            count += 1
        return f"compressed {count} log(s), saved {saved / 1e6:.2f} MB"

    def scan_data(self, max_tokens_per_line: int) -> str:
        from engine.datascan import scan_folder

        report = scan_folder(self.loaded.data_path("train_dir"), self.loaded.data_path("tokenizer_dir"), max_tokens_per_line)
        self.incident["data_scan"] = report
        return report["summary"]

    def wait_for(self, condition, timeout: float) -> tuple[bool, float]:
        """Keep observing (lines, metrics, checkpoints) until the condition holds or time runs out."""
        from engine.expressions import evaluate_condition

        started = time.time()
        while True:
            snapshot = self.sup.observe()
            held, _error = evaluate_condition(condition, {"state": snapshot, "config": self.loaded.config})
            waited = time.time() - started
            # Stop waiting when something else needs the watcher: the trainer died or stopped progressing.
            stalled = snapshot.seconds_since_progress >= snapshot.hang_timeout_s
            if held or waited >= timeout or not snapshot.trainer.alive or stalled:
                return held, waited
            time.sleep(self.loaded.config.watch.poll_interval_s)

    # --- configuration and people --------------------------------------------------------------
    def update_config(self, updates: dict) -> str:
        before = {k: getattr(self.loaded.config, k) for k in updates}
        self.sup.write_config(updates)
        self.incident.setdefault("config_changes", {}).update({k: [before[k], v] for k, v in updates.items()})
        return "run config: " + ", ".join(f"{k} {before[k]} -> {v}" for k, v in updates.items())

    def set_env(self, variables: dict) -> str:
        self.sup.set_env(variables)
        return "environment for later launches: " + ", ".join(f"{k}={v}" for k, v in variables.items())

    def notify(self, text: str) -> None:
        self.sup.notifier.incident_update(self.incident["id"], text)

    def note(self, text: str) -> None:
        self.incident.setdefault("notes", []).append(text)

    def escalate(self, reason: str) -> None:
        self.escalated_reason = reason


def checkpoint_micro_batch(step_dir: Path) -> int | None:
    """micro_batch_size the checkpoint was trained with (litgpt writes it to hyperparameters.yaml)."""
    path = step_dir / "hyperparameters.yaml"
    if not path.is_file():
        return None
    try:
        data = YAML(typ="safe", pure=True).load(path.read_text())
        return int(data["train"]["micro_batch_size"])
    except Exception:  # noqa: BLE001 - unknown means "assume unchanged"
        return None


def _names(names: list[str], limit: int = 10) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
