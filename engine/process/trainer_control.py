"""The run's trainer and its settings: launch it (through its adapter), stop it, report on it, and
change the run config or environment that the next launch gets. Everything it does is journaled."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

import psutil

from engine.core.crash_points import crash_point
from engine.core.durable import atomic_write_text
from engine.records.journal import Journal
from engine.checkpoints.partial_saves import clear_trainer_tmp
from engine.process.identity import SecondTrainerRefused, live_trainers_of
from engine.process.ranks import RANKS_DIR_ENV, RankWatch, group_exit_pending
from engine.core.state import TrainerStatus
from engine.observe.throughput import ProgressMeaning, progress_meaning_of
from engine.process.env_changes import on_gpu, without_known_crashes
from engine.process.trainer_env import release_short_tmpdir, trainer_environment
from engine.process.trainer_process import TrainerProcess, read_exit_status, signal_name
from engine.process.warm_spare import SparePool
from engine.core.write_trouble import WriteTrouble, passing
from engine.process.launch_spec import LaunchSpec

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig
    from engine.core.run_folder import RunFolder

LAUNCH_SPACE_WAIT_S = 60.0   # a relaunch onto a full run folder waits this long for space, then fails cleanly


class LaunchesTrainer(Protocol):
    """What this layer asks of the trainer's adapter (engine/trainers/base.TrainerAdapter, a floor above)."""

    def prepare_launch(self, loaded: LoadedConfig, launch_dir: Path, resume_from: Path | None,
                       data_hash: str) -> LaunchSpec: ...


# The caller's adapter, kept whole: the watch also resumes through it (TrainerAdapter.prepare_resume).
Adapter = TypeVar("Adapter", bound=LaunchesTrainer)


class TrainerControl(Generic[Adapter]):
    def __init__(self, loaded: LoadedConfig, adapter: Adapter, journal: Journal, data_hash: str, trouble: WriteTrouble | None = None,
                 spares: SparePool | None = None):
        self.loaded = loaded              # the run config in force; a recovery may rewrite it
        self.adapter = adapter
        self.journal = journal
        self.data_hash = data_hash
        self.process: TrainerProcess | None = None
        self.launches = 0
        self.extra_env: dict[str, str] = {}          # remedies' variables for every later launch (set_env)
        self.diagnostic_env: dict[str, str] = {}     # ... only until a launch carrying them trains healthily
        self.diagnostics_carried_by: int | None = None   # the launch that carries diagnostic_env
        self.env_effect_pending: dict | None = None   # an env change whose throughput after is not yet measured
        self.past_exit: tuple[int | None, str | None] = (None, None)   # what an earlier watcher saw (dry-run)
        self.trouble = trouble or WriteTrouble()
        self.ranks = RankWatch(None)      # the ranks of the current launch (engine/process/ranks.py)
        self.spares = spares or SparePool()   # this watcher's warm spare (trainer.warm_spare)
        self.long_tmpdir: str | None = None   # the last launch's TMPDIR as its adapter gave it

    @property
    def folder(self) -> RunFolder:
        return self.loaded.folder

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.alive

    @property
    def progress_meaning(self) -> ProgressMeaning:
        """What one progress line stands for under the run config in force (the adapter's word): a recovery that
        changes the micro-batch changes it for the next launch."""
        return progress_meaning_of(self.adapter, self.loaded.config)

    def launch(self, resume_file: Path | None) -> TrainerProcess:
        self.refuse_second_trainer()
        self.launches += 1
        folder = self.folder
        launch_dir = folder.launch_dir(self.launches)
        launch_dir.mkdir(parents=True, exist_ok=True)
        self._copy_config(launch_dir / "run_config.yaml")  # the hyperparameters of this launch
        clear_trainer_tmp(self.loaded.out_dir)
        self._stop_leftover_ranks()
        spec = self._prepare(launch_dir, resume_file)
        spec.env.update(self.extra_env)
        spec.env.update(self.diagnostic_env)
        self.diagnostics_carried_by = self.launches if self.diagnostic_env else None
        if self.env_effect_pending is not None and self.env_effect_pending.get("launch") is None:
            self.env_effect_pending["launch"] = self.launches   # the first launch with the change measures "after"
        safe, notes = without_known_crashes(spec.env, on_gpu(self.loaded.config.trainer.device))
        spec = replace(spec, env=safe)
        for note in notes:   # the user's trainer.env, or an older journal's set_env
            self.journal.append("env_lowered", launch=self.launches, note=note)
        self.ranks = RankWatch(launch_dir / "ranks")
        spec.env[RANKS_DIR_ENV] = str(self.ranks.folder)
        self.long_tmpdir = spec.env.get("TMPDIR")   # trainer_environment may hand it over as a short link
        spec = replace(spec, env=trainer_environment(spec.env, folder, self.loaded.config.notifications))
        log_path = folder.trainer_log(self.launches)
        self.process = TrainerProcess.launch(spec, log_path, folder.exit_status(self.launches), self.spares)
        crash_point("trainer-launched")   # the tests: a watcher killed before the journal knows this launch
        self._write_pid(self.process.pid)
        self.journal.append("launch", launch=self.launches, pid=self.process.pid, log=str(log_path),
                            exit_status=str(self.process.status_path), started=self.process.started_at,
                            resume_from=str(resume_file) if resume_file else None, argv=spec.argv)
        return self.process

    def refuse_second_trainer(self) -> None:
        """One trainer per run folder, whatever happened before (an escalation left one running, a
        watcher crashed, the journal lost a launch): any live trainer of this run_dir other than the one
        this watcher controls stops the launch."""
        if self.process is not None and self.process.alive:
            raise SecondTrainerRefused(f"trainer pid {self.process.pid} of this run is still running: "
                                       "it must end before a relaunch")
        others = live_trainers_of(self.folder.root)
        if others:
            pid, status = others[0]
            raise SecondTrainerRefused(
                f"a trainer of this run folder is already running (pid {pid}, recorded in {status}); runbook "
                f"will not start a second one into {self.loaded.out_dir}. Stop it (kill {pid}) or let it finish, "
                "then run `runbook watch` again")

    # --- a full run folder (engine/core/write_trouble.py) -----------------------------------------------
    def _copy_config(self, dest: Path) -> None:
        """A record for people, not needed to launch: a full disk skips it (said once), never half a copy."""
        try:
            self.loaded.save_copy(dest)
        except OSError as error:
            if not passing(error):
                raise
            dest.unlink(missing_ok=True)
            self.trouble.failed("launch copies", error, "launching without this launch's run_config.yaml copy")

    def _prepare(self, launch_dir: Path, resume_file: Path | None) -> LaunchSpec:
        """The trainer's own launch files are needed: wait a while for space, then fail the launch cleanly."""
        deadline = time.monotonic() + LAUNCH_SPACE_WAIT_S
        while True:
            try:
                return self.adapter.prepare_launch(self.loaded, launch_dir, resume_file, self.data_hash)
            except OSError as error:
                if not passing(error) or time.monotonic() >= deadline:
                    raise
                self.trouble.failed(f"the launch files in {launch_dir}", error,
                                    f"waiting up to {LAUNCH_SPACE_WAIT_S:g} s for space before launching the trainer")
                time.sleep(0.5)

    def _write_pid(self, pid: int) -> None:
        try:
            atomic_write_text(self.folder.trainer_pid, f"{pid}\n")
        except OSError as error:
            if not passing(error):
                raise
            self.folder.trainer_pid.unlink(missing_ok=True)   # a stale pid is worse than none: someone may signal it
            self.trouble.failed("trainer.pid", error, f"removed the old one; the journal has pid {pid}")

    def adopt_unjournaled(self) -> TrainerProcess | None:
        """A live trainer of a launch the journal never heard of (its watcher was killed between the
        launch and the journal's line): proven by its launcher's record (pid, kernel start ticks, boot id),
        journaled now and attached, so that a new watcher takes it back instead of refusing to start."""
        for pid, status_path in live_trainers_of(self.folder.root):
            launch = self.folder.launch_of(status_path)
            record = read_exit_status(status_path)
            if launch is None or launch <= self.launches or record.get("trainer_start_ticks") is None:
                continue   # journaled already, or a record too old to prove the process exactly
            started = process_started(pid)
            log_path = self.folder.trainer_log(launch)
            self.launches = launch
            self._write_pid(pid)
            self.journal.append("launch", launch=launch, pid=pid, log=str(log_path), exit_status=str(status_path),
                                started=started, resume_from=None, argv=None, adopted=True)
            return self.attach(pid, log_path, started, launch)
        return None

    def attach(self, pid: int, log: Path, started: float | None, launch: int) -> TrainerProcess:
        """The trainer an earlier watcher launched, alive or not (its launcher recorded how it ended)."""
        self.process = TrainerProcess.attach(pid, log, started, self.folder.exit_status(launch))
        self.ranks = RankWatch(self.folder.launch_dir(launch) / "ranks")
        return self.process

    def release_tmpdir_link(self) -> None:
        """The watcher ends: the short TMPDIR link (trainer_env.short_tmpdir) goes, unless a trainer still uses it."""
        if self.long_tmpdir and not self.alive:
            release_short_tmpdir(self.long_tmpdir)

    def stop(self, reason: str) -> str:
        if self.process is None:
            return "no trainer"
        text = self.process.stop(self.loaded.config.watch.grace_period_s)
        self.journal.append("trainer_stopped", pid=self.process.pid, reason=reason, detail=text)
        return text + self._stop_leftover_ranks()

    def _stop_leftover_ranks(self) -> str:
        """Ranks that outlived rank 0 (a stopped one, an orphan) hold ports and memory: stop them too."""
        stopped = self.ranks.stop_leftovers(self.loaded.config.watch.grace_period_s)
        if not stopped:
            return ""
        self.journal.append("ranks_stopped", ranks=stopped)
        return "; stopped the ranks left over: " + ", ".join(stopped)

    def status(self) -> TrainerStatus:
        t = self.process
        if t is None:
            code, sig = self.past_exit
            return TrainerStatus(launches=self.launches, exit_code=code, signal=sig)
        alive = t.alive
        code = None if alive else t.poll()
        ended = read_exit_status(t.status_path).get("ended") if code is not None else None
        ranks = self.ranks.status((code, ended) if code is not None and isinstance(ended, (int, float)) else None)
        now = time.time()
        return TrainerStatus(
            pid=t.pid, alive=alive, exit_code=code, signal=signal_name(code), launches=self.launches,
            seconds_running=now - t.started_at, stopped=alive and t.stopped,
            exit_pending=alive and (t.exit_pending or group_exit_pending(ranks, now)),
            ranks=ranks,
        )

    def write_config(self, updates: dict) -> None:
        self.loaded = self.loaded.write_back(updates)
        self.journal.append("config_changed", updates=updates)

    def set_env(self, variables: dict, diagnostic: bool = False, incident: str | None = None) -> list[str]:
        """Variables for later launches; a value known to crash here is replaced (and said). Diagnostic ones hold
        until a launch carrying them trains watch.diagnostics_healthy_steps steps (lift_diagnostics)."""
        safe, notes = without_known_crashes(dict(variables), on_gpu(self.loaded.config.trainer.device))
        (self.diagnostic_env if diagnostic else self.extra_env).update(safe)
        for name in safe:   # the newest setting of a name decides whether it is lifted
            (self.extra_env if diagnostic else self.diagnostic_env).pop(name, None)
        self.journal.append("env", vars=safe, diagnostic=diagnostic, incident=incident, notes=notes)
        return notes

    def note_env_change(self, incident: str | None, names: list[str], tokens_per_sec_before: float | None) -> None:
        self.env_effect_pending = {"incident": incident, "names": sorted(names), "before": tokens_per_sec_before,
                                   "launch": None}

    def env_effect_due(self, healthy_steps: int, steps_this_launch: int) -> bool:
        pending = self.env_effect_pending
        return pending is not None and pending["launch"] == self.launches and steps_this_launch >= healthy_steps

    def record_env_effect(self, tokens_per_sec_after: float | None) -> dict:
        """Throughput before the change (the incident's snapshot) and after it (its launch, once trained healthily)."""
        pending, self.env_effect_pending = self.env_effect_pending, None
        assert pending is not None
        entry = {"incident": pending["incident"], "names": pending["names"], "launch": pending["launch"],
                 "tokens_per_sec_before": pending["before"], "tokens_per_sec_after": tokens_per_sec_after}
        self.journal.append("env_effect", **entry)
        return entry

    def diagnostics_due(self, healthy_steps: int, steps_this_launch: int) -> bool:
        return bool(self.diagnostic_env) and self.diagnostics_carried_by == self.launches \
            and steps_this_launch >= healthy_steps

    def lift_diagnostics(self, reason: str) -> dict[str, str]:
        lifted, self.diagnostic_env = self.diagnostic_env, {}
        self.diagnostics_carried_by = None
        self.journal.append("env_lifted", names=sorted(lifted), reason=reason)
        return lifted

    def restore_env(self, values: dict[str, str | None], reason: str) -> None:
        """Put variables back as they were before a remedy (None: unset), for every later launch."""
        for name, value in values.items():
            self.extra_env.pop(name, None)
            self.diagnostic_env.pop(name, None)
            if value is not None:
                self.extra_env[name] = value
        self.journal.append("env_restored", values=values, reason=reason)

    def continue_from(self, launches: int, extra_env: dict[str, str] | None = None,
                      diagnostic_env: dict[str, str] | None = None) -> None:
        """A restarted watcher's control: the launches and (None: left as they are) the remedies' variables the
        journal holds."""
        self.launches = launches
        if extra_env is not None:
            self.extra_env = dict(extra_env)
        if diagnostic_env is not None:
            self.diagnostic_env = dict(diagnostic_env)

    def env_in_force(self) -> dict[str, str]:
        """What remedies add to the next launch's environment."""
        return {**self.extra_env, **self.diagnostic_env}


def process_started(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None
