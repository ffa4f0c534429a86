"""An optional Prometheus endpoint on the watcher (`watch.metrics` in the run config; docs/metrics.md).

Two halves. `metric_families` is PURE: what the watcher knows at one instant (its run phase, the
last snapshot, the run's incident records, when the newest verified checkpoint was saved) -> the
metric values, as plain data a test can compare. `MetricsEndpoint` serves them with prometheus_client's
own HTTP thread from a dedicated CollectorRegistry (never the process-global one). The watch loop does
no work for it and does not know it: `RunView` subscribes to the loop's event bus (engine/core/events.py)
and keeps the newest phase and snapshot (immutable objects) it heard; a scrape reads those and the
incident files (every watcher's, so counters survive a restart) on the server's thread.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator
from wsgiref.simple_server import WSGIServer

from engine.core.durable import atomic_write_text
from engine.core.events import Observed, Transition, WatchEvent
from engine.core.run_folder import RunFolder
from engine.core.state import RunPhase, StateSnapshot
from engine.core.settings import MetricsSettings  # noqa: F401 - the settings model lives in core
from engine.records.incident_store import BadIncidentRecord, IncidentStore

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

ADDRESS_FILE = RunFolder(Path()).metrics_address.name   # in run_dir while the endpoint serves: the URL to scrape


@dataclass(frozen=True)
class IncidentFigures:
    """What the metrics need of one incident record."""

    playbook: str
    outcome: str            # open, recovered, escalated, failed
    steps_lost: int | None


@dataclass(frozen=True)
class WatcherView:
    """Everything one scrape reports, read at one instant."""

    phase: RunPhase
    snapshot: StateSnapshot | None          # None before the first observation
    incidents: tuple[IncidentFigures, ...]
    checkpoint_saved_at: float | None       # mtime of the newest verified checkpoint's resume file
    now: float


@dataclass(frozen=True)
class Family:
    name: str               # counters end in _total, as exposed
    kind: str               # "gauge" or "counter"
    help: str
    labels: tuple[str, ...] = ()
    samples: tuple[tuple[tuple[str, ...], float], ...] = ()   # (label values, value)


def goodput(useful_steps: int, steps_lost: int) -> float | None:
    """Useful / computed optimizer steps, as `runbook report` defines it (runbook/report.py): the
    steps on the path to the current model over every step computed, where each recovered failure
    made the relaunch redo its steps_lost."""
    computed = useful_steps + steps_lost
    return useful_steps / computed if computed else None


def metric_families(view: WatcherView) -> list[Family]:
    """PURE. The metric values of one instant. A value nobody knows yet is left out, not exposed as 0."""
    def one(name: str, help_: str, value: float | None, kind: str = "gauge") -> list[Family]:
        return [] if value is None else [Family(name, kind, help_, samples=(((), float(value)),))]

    snap = view.snapshot
    closed: dict[tuple[str, str], int] = {}
    for i in view.incidents:
        if i.outcome != "open":   # an outcome is final once set: a counter per (playbook, outcome) only grows
            closed[(i.playbook, i.outcome)] = closed.get((i.playbook, i.outcome), 0) + 1
    lost = sum(i.steps_lost or 0 for i in view.incidents)
    families = [
        Family("runbook_run_state", "gauge", "1 for the watcher's current run phase, 0 for the others", ("state",),
               tuple(((s.value,), 1.0 if s == view.phase else 0.0) for s in RunPhase)),
        Family("runbook_incidents_total", "counter", "closed incidents, by playbook and outcome", ("playbook", "outcome"),
               tuple(((p, o), float(n)) for (p, o), n in sorted(closed.items()))),
        *one("runbook_incidents_open", "incidents opened and not yet closed", sum(i.outcome == "open" for i in view.incidents)),
        *one("runbook_steps_lost_total", "optimizer steps redone after failures (incident records' steps_lost)", lost, "counter"),
    ]
    if snap is None:
        return families
    m, trainer = snap.metrics, snap.trainer
    ranks = trainer.ranks
    alive_ranks = sum(r.alive for r in ranks.ranks) if ranks.ranks else int(trainer.alive)
    age = None
    if view.checkpoint_saved_at is not None and snap.checkpoints.newest_verified_step is not None:
        age = max(0.0, view.now - view.checkpoint_saved_at)
    families += [
        *one("runbook_optimizer_step", "optimizer steps the trainer has finished", m.step),
        *one("runbook_tokens", "tokens trained (falls back on a rollback)", m.tokens),
        *one("runbook_tokens_per_second", "training throughput, from the trainer's progress lines", m.tokens_per_sec),
        *one("runbook_goodput_ratio", "useful / computed optimizer steps (as `runbook report`)",
             goodput(m.step, lost) if m.step is not None else None),
        *one("runbook_last_verified_checkpoint_step", "step of the newest checkpoint that passed verification",
             snap.checkpoints.newest_verified_step),
        *one("runbook_last_verified_checkpoint_age_seconds", "seconds since the newest verified checkpoint was saved", age),
        *one("runbook_seconds_since_progress", "seconds since the trainer's last progress line", snap.seconds_since_progress),
        *one("runbook_trainer_launches", "trainer launches in this run (every watcher of its run folder)", trainer.launches),
        *one("runbook_trainer_world_size", "ranks of the trainer (1: one process)", ranks.world_size),
        *one("runbook_trainer_ranks_alive", "trainer ranks whose process is alive", alive_ranks),
    ]
    return families


def endpoint_url(host: str, port: int) -> str:
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"


class _IncidentReader:
    """The run's incident records, each file parsed again only when it changed (a scrape every few
    seconds must not re-validate hundreds of records)."""

    def __init__(self, run_dir: Path):
        self.store, self.bad = IncidentStore(run_dir), BadIncidentRecord
        self.cache: dict[str, tuple[int, IncidentFigures]] = {}

    def read(self) -> tuple[IncidentFigures, ...]:
        figures = []
        for incident_id in self.store.ids():
            try:
                stamp = self.store.path(incident_id).stat().st_mtime_ns
                if self.cache.get(incident_id, (None,))[0] != stamp:
                    record = self.store.read(incident_id)
                    self.cache[incident_id] = (stamp, IncidentFigures(record.playbook, record.outcome, record.steps_lost))
                figures.append(self.cache[incident_id][1])
            except (OSError, self.bad):   # half-written or unreadable: `runbook incidents` says why
                if incident_id in self.cache:   # a record being rewritten keeps its last figures: counters never fall
                    figures.append(self.cache[incident_id][1])
                continue
        return tuple(figures)


class RunView:
    """A subscriber of the watch loop's bus: the run phase of its newest transition and its newest
    snapshot, read by a scrape on the server's thread (the pair is swapped under a lock, never torn)."""

    def __init__(self, phase: RunPhase = RunPhase.STARTING, snapshot: StateSnapshot | None = None):
        self._lock = threading.Lock()
        self._now = (phase, snapshot)   # as of subscribing: what the loop had before this view heard it

    def __call__(self, event: WatchEvent) -> None:
        match event:
            case Observed(snapshot=snapshot):
                with self._lock:
                    self._now = (self._now[0], snapshot)
            case Transition(state=phase):
                with self._lock:
                    self._now = (phase, self._now[1])

    def read(self) -> tuple[RunPhase, StateSnapshot | None]:
        with self._lock:
            return self._now


class MetricsEndpoint:
    """prometheus_client's HTTP server thread over a registry of one collector that calls `metric_families`."""

    def __init__(self, settings: MetricsSettings, run_dir: Path, run: RunView, checkpoint_file: Callable[[int], Path]):
        self.settings = settings
        self.address_file = RunFolder(run_dir).metrics_address
        self.run = run   # the bus's subscriber the supervisor registered: (run phase, last snapshot)
        self.checkpoint_file = checkpoint_file   # step -> the file whose mtime dates that checkpoint
        self.incidents = _IncidentReader(run_dir)
        self.lock = threading.Lock()             # one scrape at a time uses the incident cache
        self.server: WSGIServer | None = None
        self.thread: threading.Thread | None = None
        self.url: str | None = None

    def view(self) -> WatcherView:
        phase, snapshot = self.run.read()
        saved_at = None
        step = snapshot.checkpoints.newest_verified_step if snapshot is not None else None
        if step is not None:
            try:
                saved_at = self.checkpoint_file(step).stat().st_mtime
            except OSError:   # pruned or quarantined since the snapshot
                saved_at = None
        with self.lock:
            incidents = self.incidents.read()
        return WatcherView(phase, snapshot, incidents, saved_at, time.time())

    def start(self) -> str:
        """Bind and serve; returns the URL. OSError (port in use, unknown host) is the caller's to report."""
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        port = self.settings.port
        assert port is not None   # engine/watch/services.py starts no endpoint without a port
        server, thread = start_http_server(port, addr=self.settings.host, registry=registry)
        self.server, self.thread = server, thread
        self.url = endpoint_url(self.settings.host, server.server_address[1])
        atomic_write_text(self.address_file, self.url + "\n")
        return self.url

    def linger(self, interrupted: Callable[[], bool]) -> None:
        """An escalated run's last figures stay served for linger_s (the watcher exits right after, and a
        scrape every 15-60 s would rarely see the phase that most needs a human); `interrupted` (a signal
        to the watcher) ends the wait."""
        if self.server is None or self.run.read()[0] != RunPhase.ESCALATED:
            return
        deadline = time.monotonic() + self.settings.linger_s
        while time.monotonic() < deadline and not interrupted():
            time.sleep(0.1)

    def shutdown(self) -> None:
        if self.server is None or self.thread is None:   # set together by start()
            return
        self.address_file.unlink(missing_ok=True)   # no stale address once nobody answers there
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
        self.server = self.thread = None


class _Collector:
    def __init__(self, endpoint: MetricsEndpoint):
        self.endpoint = endpoint

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for f in metric_families(self.endpoint.view()):
            cls = CounterMetricFamily if f.kind == "counter" else GaugeMetricFamily
            family = cls(f.name, f.help, labels=list(f.labels))
            for labels, value in f.samples:
                family.add_metric(list(labels), value)
            yield family
