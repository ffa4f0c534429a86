"""Scheduled upkeep inside `runbook watch`: heartbeat + disk probe, checkpoint retention, gzip of
finished trainer logs, and an optional daily digest to Slack. APScheduler 3.x BackgroundScheduler.

Wiring (the supervisor's side):

    upkeep = Upkeep(config.upkeep, SupervisorPorts(supervisor), recovery_lock=supervisor.recovery_lock,
                    events=supervisor.events)
    upkeep.start()            # after the trainer is launched or re-attached
    ...                       # hold recovery_lock around each incident (and ideally each tick)
    upkeep.shutdown()         # in run()'s finally, before notifier.close(); safe to call twice

Every job takes `recovery_lock` without blocking and skips its run when a recovery holds it, so a
job never deletes a checkpoint or gzips a log while a recovery is deciding about them. Jobs run on
ONE worker thread, so they never overlap each other either, and each job is coalesce=True,
max_instances=1: a watcher that was suspended runs a missed job once, not once per missed slot.
The job methods are public and synchronous, so tests (and the supervisor) can call them directly.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from engine.core.events import UpkeepRan, WatchWarning, ignore, Publish
from engine.core.durable import atomic_write_text
from engine.core.log_compression import compress_finished_logs
from engine.core.write_trouble import WriteTrouble, passing, reason
from engine.core.settings import UpkeepSettings  # noqa: F401 - the settings model lives in core
from engine.records.incident_store import IncidentsUnreadable, IncidentStore
from engine.checkpoints.catalog import CheckpointCatalog
from engine.checkpoints.retention import retain
from engine.core.notifier import Notifier

if TYPE_CHECKING:
    from engine.watch.parts import WatchParts

HEARTBEAT_NAME = "heartbeat.json"
DIGEST_WINDOW_S = 24 * 3600


class UpkeepPorts(Protocol):
    """What upkeep needs from the watcher (the supervisor implements it; values are read per run, and
    only read: properties or plain attributes both fit)."""

    @property
    def run_dir(self) -> Path: ...
    @property
    def out_dir(self) -> Path: ...
    @property
    def keep_last_k(self) -> int: ...
    @property
    def catalog(self) -> CheckpointCatalog: ...   # the one prune
    @property
    def notifier(self) -> Notifier: ...

    def best_step(self) -> int | None: ...      # step of the best validation loss, if known
    def trainer_alive(self) -> bool: ...
    def current_log(self) -> Path | None: ...   # the log the live trainer writes
    def status(self) -> dict: ...               # "step", "tokens", "tokens_per_sec", "run_state" (all optional)


class SupervisorPorts:
    """UpkeepPorts over the watch loop's WatchParts (engine/watch/parts.py). Jobs run while holding
    the recovery lock (as the watch loop does), so the catalog is never changed by both at once."""

    def __init__(self, parts: WatchParts) -> None:
        self.parts = parts

    @property
    def run_dir(self) -> Path:
        return self.parts.control.loaded.run_dir

    @property
    def out_dir(self) -> Path:
        return self.parts.control.loaded.out_dir

    @property
    def keep_last_k(self) -> int:
        return self.parts.control.loaded.config.keep_last_k   # a recovery may have rewritten the config

    @property
    def catalog(self) -> CheckpointCatalog:
        return self.parts.catalog

    @property
    def notifier(self) -> Notifier:
        return self.parts.notifier

    def best_step(self) -> int | None:
        return self.parts.session.best_val_step()   # the watch loop's one source of "best"

    def trainer_alive(self) -> bool:
        return self.parts.control.alive

    def current_log(self) -> Path | None:
        process = self.parts.control.process
        return process.log_path if process is not None else None

    def held(self) -> dict[str, int]:
        return self.parts.held()

    def status(self) -> dict:
        return self.parts.session.status()


@dataclass(frozen=True)
class JobRun:
    job: str
    status: str          # "ok" | "skipped" | "error"
    summary: str
    time: float


class Upkeep:
    JOBS = ("heartbeat", "retention", "gzip_logs", "digest")

    def __init__(self, settings: UpkeepSettings, ports: UpkeepPorts, recovery_lock: threading.Lock | None = None,
                 events: Publish | None = None, timezone: dt.tzinfo | None = None,
                 trouble: WriteTrouble | None = None):
        self.settings = settings
        self.ports = ports
        self.recovery_lock = recovery_lock or threading.Lock()
        self.events = events or ignore
        self.trouble = trouble or WriteTrouble(self.events)   # a full run folder: one warning, not one per beat
        self.timezone = timezone                 # None: the machine's local zone (APScheduler's default)
        self.last: dict[str, JobRun] = {}
        self._scheduler: BackgroundScheduler | None = None
        self._state = threading.Lock()
        self._stopped = False

    # --- schedule ------------------------------------------------------------------------------
    def triggers(self, now: dt.datetime) -> dict[str, IntervalTrigger | CronTrigger]:
        """job name -> APScheduler trigger, for the jobs the settings switch on. `now` must be aware."""
        s = self.settings
        out: dict[str, IntervalTrigger | CronTrigger] = {}
        for name, seconds in (("heartbeat", s.heartbeat_interval_s), ("retention", s.retention_interval_s),
                              ("gzip_logs", s.log_gzip_interval_s)):
            if seconds is not None:
                out[name] = IntervalTrigger(seconds=seconds, start_date=now + dt.timedelta(seconds=seconds),
                                            timezone=now.tzinfo)
        if s.digest_enabled:
            hour, minute = (int(part) for part in s.digest_time.split(":"))
            out["digest"] = CronTrigger(hour=hour, minute=minute, timezone=self.timezone or now.tzinfo)
        return out

    def start(self) -> None:
        with self._state:
            if self._stopped or self._scheduler is not None:
                return                                   # started once; never restarted after shutdown
            kwargs = {"timezone": self.timezone} if self.timezone else {}
            scheduler = BackgroundScheduler(executors={"default": ThreadPoolExecutor(1)}, **kwargs)
            now = dt.datetime.now(scheduler.timezone)
            for name, trigger in self.triggers(now).items():
                scheduler.add_job(
                    getattr(self, name), trigger, id=name, name=f"upkeep {name}",
                    coalesce=True, max_instances=1,
                    misfire_grace_time=None,             # a late run beats a silently dropped one
                    # heartbeat.json should exist right away, not one interval later
                    **({"next_run_time": now} if name == "heartbeat" else {}),
                )
            scheduler.start()
            self._scheduler = scheduler

    def shutdown(self) -> None:
        """Stop scheduling and wait for a running job; idempotent (APScheduler's own raises twice)."""
        with self._state:
            if self._stopped:
                return
            self._stopped = True
            scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None and scheduler.running:
            scheduler.shutdown(wait=True)

    @property
    def running(self) -> bool:
        return self._scheduler is not None and self._scheduler.running

    # --- the jobs (public: callable directly) --------------------------------------------------
    def heartbeat(self) -> JobRun:
        return self._guarded("heartbeat", self._heartbeat)

    def retention(self) -> JobRun:
        return self._guarded("retention", self._retention)

    def gzip_logs(self) -> JobRun:
        return self._guarded("gzip_logs", self._gzip_logs)

    def digest(self) -> JobRun:
        return self._guarded("digest", self._digest)

    def _guarded(self, name: str, work: Callable[[], str]) -> JobRun:
        if not self.recovery_lock.acquire(blocking=False):
            run = JobRun(name, "skipped", "a recovery is in progress", time.time())
        else:
            try:
                run = JobRun(name, "ok", work(), time.time())
            except Exception as error:  # noqa: BLE001 - a failing job is reported, never kills the watcher
                run = JobRun(name, "error", f"{type(error).__name__}: {error}", time.time())
                self.events(WatchWarning(f"upkeep {name} failed: {run.summary}"))
            finally:
                self.recovery_lock.release()
        self.last[name] = run
        self.events(UpkeepRan(name, run.status, run.summary))
        return run

    def _heartbeat(self) -> str:
        ports = self.ports
        status = ports.status() or {}
        probe = ports.out_dir if Path(ports.out_dir).exists() else ports.run_dir
        disk = shutil.disk_usage(probe)
        now = time.time()
        beat = {
            "time": now,
            "time_iso": dt.datetime.fromtimestamp(now, dt.timezone.utc).isoformat(timespec="seconds"),
            "watcher_pid": os.getpid(),
            "step": status.get("step"),
            "trainer_alive": ports.trainer_alive(),
            "disk": {"path": str(probe), "free_bytes": disk.free, "total_bytes": disk.total,
                     "free_percent": round(100.0 * disk.free / disk.total, 2) if disk.total else 0.0},
            "status": status,
        }
        held: dict[str, int] = getattr(ports, "held", dict)()
        if held:   # for `runbook status`: the journal on disk lacks what this watcher still holds in memory
            beat["held_in_memory"] = held
        try:
            atomic_write_text(Path(ports.run_dir) / HEARTBEAT_NAME, json.dumps(beat, indent=2, default=str) + "\n")
        except OSError as error:
            if not passing(error):
                raise
            self.trouble.failed("the heartbeat", error, "skipping heartbeats until space returns")
            return f"skipped ({reason(error)})"
        self.trouble.worked("the heartbeat")
        return f"step {beat['step']}, {disk.free / 1e9:.1f} GB free"

    def _retention(self) -> str:
        ports = self.ports
        result = retain(ports.catalog, ports.keep_last_k, ports.best_step(), ports.trainer_alive())
        return f"deleted {len(result.deleted)} checkpoint(s) ({result.freed_bytes / 1e6:.1f} MB); kept steps {result.kept_steps}"

    def _gzip_logs(self) -> str:
        ports = self.ports
        count, saved = compress_finished_logs(Path(ports.run_dir) / "logs", ports.current_log(), ports.trainer_alive())
        return f"compressed {count} finished log(s), saved {saved / 1e6:.2f} MB"

    def _digest(self) -> str:
        ports = self.ports
        sender = getattr(ports.notifier, "digest", None)
        if sender is None:
            return "the notifier cannot send a digest"
        title, text, fields = digest_message(ports.status() or {}, read_incidents(Path(ports.run_dir)), time.time())
        sender(title, text, fields)
        return text


# --- helpers -------------------------------------------------------------------------------------
def read_incidents(run_dir: Path) -> list[dict]:
    """Every usable incident record of the run, as JSON (a bad one is skipped: this is a digest)."""

    try:
        return [incident.to_json() for incident in IncidentStore(run_dir).read_all()[0]]
    except IncidentsUnreadable:
        return []


def digest_message(status: dict, incidents: list[dict], now: float,
                   window_s: float = DIGEST_WINDOW_S) -> tuple[str, str, dict[str, str]]:
    """PURE. (title, one-line text, fields) for the daily digest."""
    recent = [r for r in incidents if isinstance(r.get("opened_at"), (int, float)) and now - r["opened_at"] < window_s]
    outcomes: dict[str, int] = {}
    for r in recent:
        outcomes[str(r.get("outcome"))] = outcomes.get(str(r.get("outcome")), 0) + 1

    def total(key: str) -> float:
        return sum(r[key] for r in recent if isinstance(r.get(key), (int, float)))

    step, tokens, tps = status.get("step"), status.get("tokens"), status.get("tokens_per_sec")
    fields = {
        "run phase": str(status.get("run_state", "?")),
        "step": "?" if step is None else f"{step:,}",
        "tokens": "?" if tokens is None else f"{tokens:,}",
        "tokens/s": "?" if tps is None else f"{tps:,.0f}",
        "incidents (24 h)": ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "none",
        "lost compute (24 h)": f"{int(total('steps_lost')):,} steps, {int(total('tokens_lost')):,} tokens, "
                               f"{total('recovery_seconds'):,.0f} s recovering",
    }
    text = (f"Daily digest: step {fields['step']}, {fields['tokens/s']} tokens/s, {len(recent)} incident(s) in "
            f"24 h, lost {fields['lost compute (24 h)']}")
    return "Training digest", text, fields
